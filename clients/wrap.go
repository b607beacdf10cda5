package clients

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// Wrapper puts guard in front of the servers of clients' files.
type Wrapper struct {
	// Guard is the absolute path of the guard binary that wrapped entries
	// run.
	Guard string
	// Flags returns the flags of guard run (--config, --db) that an
	// entry whose env is env needs: those whose values its guard would not
	// find by itself. nil: none.
	Flags func(env map[string]string) ([]string, error)
	// Probe reports whether the server at a remote entry's URL asks for
	// OAuth (nil: ProbeOAuth, for 3 s at most). headers are the entry's
	// whose values are written out.
	Probe func(ctx context.Context, url string, sse bool, headers map[string]string) bool
}

// Action is what wrap or unwrap did to a server's entry.
type Action int

const (
	// Wrapped: the entry now starts guard run.
	Wrapped Action = iota
	// AlreadyWrapped: a guard runs the server already (left as it is).
	AlreadyWrapped
	// Left: guard does not wrap this entry (Outcome.Detail says why).
	Left
	// Restored: unwrap gave the entry back as it was.
	Restored
	// Kept: unwrap left an entry that guard wrapped (Detail says why).
	Kept
)

// Outcome is what happened to one server's entry.
type Outcome struct {
	// Section is where the entry is in its file (Claude Code's projects
	// have their own).
	Section []string
	// Name is the server's name, its key in the file.
	Name string
	// Action is what was done with it, and Detail why, where it needs
	// saying.
	Action Action
	Detail string
}

// String says what happened, as guard wrap prints it.
func (o Outcome) String() string {
	var s string
	switch o.Action {
	case Wrapped:
		s = "wrapped"
	case AlreadyWrapped:
		s = "already wrapped"
	case Left:
		s = "left as it is"
	case Restored:
		s = "restored"
	case Kept:
		s = "left wrapped"
	}
	if o.Detail != "" {
		s += ": " + o.Detail
	}
	return s
}

// Change is the planned change of one file by wrap or unwrap.
type Change struct {
	// File is the file that changes.
	File *File
	// Servers are what happens to each server that the change concerns.
	Servers []Outcome
	// Before and After are the file's contents now and as the change
	// leaves it.
	Before, After []byte
	// unwrap: the change gives back what wrap did, and forgets it.
	unwrap bool
	// record is what a wrap keeps beside the file.
	record *record
	// first: no wrap is on record, so the file is the original to keep.
	first bool
	// note, when not "", is said about the file as a whole.
	Note string
}

// Changed reports whether the change changes the file.
func (c *Change) Changed() bool { return !bytes.Equal(c.Before, c.After) }

// Wrap plans the wrapping of every server of f that guard can wrap and
// has not: nothing is written until Apply.
func (w *Wrapper) Wrap(ctx context.Context, f *File) (*Change, error) {
	before, rec, err := readWithRecord(f.Path)
	if err != nil {
		return nil, err
	}
	return w.wrap(ctx, f, before, rec)
}

// wrap is Wrap on the file's contents and its record (nil when none).
func (w *Wrapper) wrap(ctx context.Context, f *File, before []byte, rec *record) (*Change, error) {
	doc, servers, err := f.load(before)
	if err != nil {
		return nil, err
	}
	c := &Change{File: f, Before: before}
	type done struct {
		section []string
		name    string
		text    string
	}
	var wrapped []done
	for i, section := range f.sections {
		for _, e := range servers[i] {
			out := Outcome{Section: section, Name: e.name}
			ops, why, err := w.plan(ctx, f.Client, e)
			switch {
			case err != nil:
				return nil, fmt.Errorf("%s: server %q: %w", f.Path, e.name, err)
			case e.guard != "":
				out.Action, out.Detail = AlreadyWrapped, "by "+e.guard
			case ops == nil:
				out.Action, out.Detail = Left, why
			default:
				if err := doc.apply(section, e.name, ops); err != nil {
					return nil, fmt.Errorf("%s: %w", f.Path, err)
				}
				out.Action = Wrapped
				if e.disabled {
					out.Detail = "disabled, as it stays"
				}
				wrapped = append(wrapped, done{section, e.name, e.text})
			}
			c.Servers = append(c.Servers, out)
		}
	}
	c.After = doc.bytes()
	if !c.Changed() {
		return c, nil
	}
	// What wrap did, for unwrap: each entry as it was and as it is now,
	// and the file as it was, given back whole while nothing else
	// changes it.
	now, err := f.parse(c.After)
	if err != nil {
		return nil, fmt.Errorf("%s: an edit broke the file (%v): please report it", f.Path, err)
	}
	if rec == nil || rec.After != digest(before) {
		// The first wrap, or the file changed since the last: from now
		// on unwrap gives back this file whole.
		if rec == nil {
			rec, c.first = &record{}, true
		}
		rec.Before = text(before)
	}
	rec.Version, rec.After, rec.Time = recordVersion, digest(c.After), time.Now().UTC().Format(time.RFC3339)
	for _, d := range wrapped {
		wrappedText, err := entryText(now, d.section, d.name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		rec.Entries = slices.DeleteFunc(rec.Entries, func(re recordEntry) bool {
			return slices.Equal(re.Section, d.section) && re.Name == d.name
		})
		rec.Entries = append(rec.Entries, recordEntry{Section: d.section, Name: d.name, Original: text(d.text), Wrapped: text(wrappedText)})
	}
	c.record = rec
	return c, nil
}

// plan returns the edits that wrap an entry, or nil and why not.
func (w *Wrapper) plan(ctx context.Context, c *Client, e entry) ([]op, string, error) {
	switch {
	case e.fixed != "":
		return nil, e.fixed, nil
	case e.guard != "":
		return nil, "", nil
	case e.kind == kindStdio:
		return w.stdioOps(e)
	case e.kind == kindHTTP:
		r := e.remote
		if r.clientAuth != "" {
			return nil, c.Title + " " + r.clientAuth + ", which guard in its place could not", nil
		}
		if !r.authorization() && w.probe(ctx, r) {
			return nil, "its server asks for OAuth, which " + c.Title + " does itself, and guard in its place could not", nil
		}
		return w.remoteOps(e)
	}
	return nil, "neither a command nor a URL that guard can read", nil
}

func (w *Wrapper) probe(ctx context.Context, r remote) bool {
	headers := map[string]string{}
	for _, h := range r.headers {
		// Only values written out: a reference (${...}) means nothing
		// here.
		if !strings.Contains(h.value, "$") {
			headers[h.key] = h.value
		}
	}
	if w.Probe != nil {
		return w.Probe(ctx, r.url, r.sse, headers)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return ProbeOAuth(ctx, nil, r.url, r.sse, headers)
}

// flags are guard run's first arguments for an entry named name whose
// env is env.
func (w *Wrapper) flags(name string, env map[string]string) ([]string, error) {
	args := []string{"run", "--name", name}
	if w.Flags != nil {
		more, err := w.Flags(env)
		if err != nil {
			return nil, err
		}
		args = append(args, more...)
	}
	return args, nil
}

// stdioOps wrap a command: guard runs it, its arguments after guard's.
func (w *Wrapper) stdioOps(e entry) ([]op, string, error) {
	v := e.value
	if a, ok := v["args"]; ok {
		if _, ok := a.([]any); !ok {
			return nil, "its args are not a list", nil
		}
	}
	args, err := w.flags(e.name, envOf(v))
	if err != nil {
		return nil, "", err
	}
	args = append(args, "--", v["command"].(string))
	return []op{
		{kind: opSet, key: "command", value: w.Guard},
		{kind: opPrepend, key: "args", value: args, after: "command"},
	}, "", nil
}

// remoteOps turn an HTTP entry into a command: guard run --upstream,
// each header's value in a variable of the entry's env rather than in
// its arguments.
func (w *Wrapper) remoteOps(e entry) ([]op, string, error) {
	v, r := e.value, e.remote
	env := envOf(v)
	var add []member
	var headerFlags, forward []string
	for _, h := range r.headers {
		name := headerVariable(h.key)
		for n := 2; ; n++ {
			if old, ok := env[name]; !ok || old == h.value {
				break
			}
			name = fmt.Sprintf("%s_%d", headerVariable(h.key), n)
		}
		if _, ok := env[name]; !ok {
			add = append(add, member{name, h.value})
		}
		env[name] = h.value
		headerFlags = append(headerFlags, "--header-env", h.key+"="+name)
	}
	for _, h := range r.envHeaders {
		headerFlags = append(headerFlags, "--header-env", h.key+"="+h.value)
		forward = append(forward, h.value)
	}
	if r.bearerEnv != "" {
		headerFlags = append(headerFlags, "--bearer-env", r.bearerEnv)
		forward = append(forward, r.bearerEnv)
	}
	args, err := w.flags(e.name, env)
	if err != nil {
		return nil, "", err
	}
	args = append(args, "--upstream", r.url)
	if r.sse {
		args = append(args, "--sse")
	}
	args = append(args, headerFlags...)
	ops := []op{
		{kind: opSet, key: "command", value: w.Guard, before: r.urlKey},
		{kind: opSet, key: "args", value: args, after: "command"},
	}
	last := "args"
	if len(add) > 0 {
		ops = append(ops, op{kind: opAddMembers, key: "env", value: add, after: last})
		last = "env"
	}
	if len(forward) > 0 {
		// Codex gives a server only the variables its env_vars names
		// beyond a few of its own.
		if have, ok := v["env_vars"].([]any); ok {
			forward = slices.DeleteFunc(forward, func(s string) bool { return slices.Contains(have, any(s)) })
		}
		if len(forward) > 0 {
			ops = append(ops, op{kind: opAppend, key: "env_vars", value: forward, after: last})
		}
	}
	if _, ok := v["type"]; ok {
		ops = append(ops, op{kind: opSet, key: "type", value: "stdio"})
	}
	for _, d := range r.drop {
		ops = append(ops, op{kind: opDelete, key: d})
	}
	return ops, "", nil
}

// envOf is an entry's env, its string values.
func envOf(v map[string]any) map[string]string {
	env := map[string]string{}
	for _, m := range stringMembers(v["env"]) {
		env[m.key] = m.value
	}
	return env
}

// ErrChanged is a file that changed between reading and writing it.
var ErrChanged = errors.New("the file changed while guard was editing it")

// Apply writes the change: the file atomically (the original kept beside
// it as NAME.guard-backup before the first change), and the record of
// what wrap did beside it. It returns ErrChanged, and writes nothing,
// when the file is no longer what the change was planned on.
func (c *Change) Apply() error {
	now, mode, err := readFile(c.File.Path)
	if err != nil {
		return err
	}
	if !bytes.Equal(now, c.Before) {
		return fmt.Errorf("%s: %w", c.File.Path, ErrChanged)
	}
	switch {
	case !c.unwrap && !c.Changed():
		return nil
	case c.unwrap && !recordExists(c.File.Path):
		return nil
	}
	if c.first {
		if err := c.keepOriginal(mode); err != nil {
			return fmt.Errorf("keeping the original: %w", err)
		}
	}
	if !c.unwrap {
		// The record before the file: a wrapped file without its record
		// could not be given back.
		if err := writeRecord(c.File.Path, c.record, mode); err != nil {
			return err
		}
	}
	if c.Changed() {
		if err := writeAtomic(c.File.Path, c.After, mode); err != nil {
			return err
		}
	}
	if c.unwrap {
		return c.forget()
	}
	return nil
}

// keepOriginal keeps the file as it is as NAME.guard-backup. A backup
// there already, of an earlier wrap that unwrap could not give back
// whole, is not lost: it moves to NAME.guard-backup.N.
func (c *Change) keepOriginal(mode fs.FileMode) error {
	backup := c.File.Path + BackupSuffix
	old, err := os.ReadFile(backup)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case bytes.Equal(old, c.Before):
		return nil
	default:
		for n := 1; ; n++ {
			aside := fmt.Sprintf("%s.%d", backup, n)
			if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
				if err := os.Rename(backup, aside); err != nil {
					return err
				}
				break
			}
		}
	}
	return writeAtomic(backup, c.Before, mode)
}

// forget removes, after an unwrap, the record, and the backup when the
// file is again what it holds.
func (c *Change) forget() error {
	if err := os.Remove(c.File.Path + recordSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	backup := c.File.Path + BackupSuffix
	if b, err := os.ReadFile(backup); err == nil && bytes.Equal(b, c.After) {
		return os.Remove(backup)
	}
	return nil
}

// Commit plans a change and applies it, planning again once when the file
// changed meanwhile (a client that rewrites its file while it runs). dry
// plans only.
func Commit(plan func() (*Change, error), dry bool) (*Change, error) {
	for try := 0; ; try++ {
		c, err := plan()
		if err != nil || dry {
			return c, err
		}
		err = c.Apply()
		if errors.Is(err, ErrChanged) && try == 0 {
			continue
		}
		return c, err
	}
}

// BackupSuffix names the copy of a file as it was before guard first
// changed it.
const BackupSuffix = ".guard-backup"

// load parses the file's contents, and reads its servers section by
// section.
func (f *File) load(data []byte) (document, [][]entry, error) {
	doc, err := f.parse(data)
	if err != nil {
		return nil, nil, err
	}
	servers := make([][]entry, len(f.sections))
	for i, section := range f.sections {
		des, err := doc.entries(section)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		for _, de := range des {
			servers[i] = append(servers[i], f.Client.read(de))
		}
	}
	return doc, servers, nil
}

// parse reads the file's syntax.
func (f *File) parse(data []byte) (document, error) {
	var d document
	var err error
	if f.Client.toml {
		d, err = parseTOML(data)
	} else {
		d, err = parseJSON(data)
	}
	var se *SyntaxError
	if errors.As(err, &se) {
		if se.Line > 0 {
			return nil, fmt.Errorf("%s:%d: %s", f.Path, se.Line, se.Msg)
		}
		return nil, fmt.Errorf("%s: %s", f.Path, se.Msg)
	}
	return d, err
}

// entryText is the text of the entry named, or an error when there is
// none.
func entryText(d document, section []string, name string) (string, error) {
	des, err := d.entries(section)
	if err != nil {
		return "", err
	}
	for _, de := range des {
		if de.name == name {
			return de.text, nil
		}
	}
	return "", fmt.Errorf("no server %q", name)
}

// sameEntry reports whether two texts of an entry say the same (white
// space, comments and the order of members aside).
func (f *File) sameEntry(a, b string, section []string, name string) bool {
	if a == b {
		return true
	}
	va, err1 := f.decodeEntry(a, section, name)
	vb, err2 := f.decodeEntry(b, section, name)
	return err1 == nil && err2 == nil && equalValues(va, vb)
}

// decodeEntry decodes an entry's text alone: a JSON value, or a TOML
// table with its sub-tables.
func (f *File) decodeEntry(text string, section []string, name string) (map[string]any, error) {
	var d document
	var err error
	if f.Client.toml {
		d, err = parseTOML([]byte(text))
	} else {
		d, err = parseJSON([]byte(`{"e":` + text + "\n}"))
		section, name = nil, "e"
	}
	if err != nil {
		return nil, err
	}
	des, err := d.entries(section)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		if de.name == name {
			return de.value, nil
		}
	}
	return nil, fmt.Errorf("no server %q", name)
}

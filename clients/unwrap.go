package clients

import (
	"slices"
	"sort"
	"strings"
)

// Unwrap plans giving back what wrap changed in f, as the record beside
// it says: the file as it was, to the byte, when nothing else changed it
// since; else each entry that guard wrapped, as it was. An entry changed
// since in members guard did not touch (an env, a timeout) keeps those
// changes; one whose members guard wrote were changed is left wrapped.
// Nothing is written until Apply.
func Unwrap(f *File) (*Change, error) {
	before, rec, err := readWithRecord(f.Path)
	if err != nil {
		return nil, err
	}
	return f.unwrap(before, rec)
}

// unwrap is Unwrap on the file's contents and its record (nil when none).
func (f *File) unwrap(before []byte, rec *record) (*Change, error) {
	c := &Change{File: f, Before: before, After: before, unwrap: true}
	if rec == nil {
		c.Note = "no record of a wrap by guard: nothing to give back"
		return c, nil
	}
	content := before
	if digest(before) == rec.After {
		content = []byte(rec.Before)
	}
	doc, err := f.parse(content)
	if err != nil {
		return nil, err
	}
	recorded := map[string]bool{}
	for _, re := range rec.Entries {
		recorded[strings.Join(re.Section, "\x00")+"\x00"+re.Name] = true
	}
	for _, re := range rec.Entries {
		out, err := f.unwrapEntry(doc, re, recorded)
		if err != nil {
			return nil, err
		}
		c.Servers = append(c.Servers, out)
	}
	c.After = doc.bytes()
	return c, nil
}

// unwrapEntry gives back one entry that wrap changed.
func (f *File) unwrapEntry(doc document, re recordEntry, recorded map[string]bool) (Outcome, error) {
	out := Outcome{Section: re.Section, Name: re.Name, Action: Restored}
	des, err := doc.entries(re.Section)
	if err != nil {
		return out, err
	}
	var now *docEntry
	for i := range des {
		if des[i].name == re.Name {
			now = &des[i]
		}
	}
	if now == nil {
		// Renamed since: an entry that guard did not wrap, exactly as
		// guard wrapped this one.
		for i := range des {
			if !recorded[strings.Join(re.Section, "\x00")+"\x00"+des[i].name] && f.sameEntry(des[i].text, string(re.Wrapped), re.Section, re.Name) {
				now = &des[i]
				out.Name, out.Detail = des[i].name, "renamed from "+re.Name+" since"
			}
		}
		if now == nil {
			out.Action, out.Detail = Left, "no longer in the file"
			return out, nil
		}
	}
	switch {
	case now.text == string(re.Original):
		// Given back with the whole file, or unwrapped by hand.
		return out, nil
	case f.sameEntry(now.text, string(re.Wrapped), re.Section, re.Name) && (now.name == re.Name || !f.Client.toml):
		// As guard left it: as it was, to the byte (under its new name:
		// a TOML entry's text holds its name).
		return out, doc.setEntry(re.Section, now.name, string(re.Original))
	}
	orig, err1 := f.decodeEntry(string(re.Original), re.Section, re.Name)
	wrapped, err2 := f.decodeEntry(string(re.Wrapped), re.Section, re.Name)
	if err1 != nil || err2 != nil || now.value == nil {
		out.Action, out.Detail = Kept, "guard's record of it cannot be read"
		return out, nil
	}
	ops, ok := mergeOps(orig, wrapped, now.value)
	if !ok {
		out.Action, out.Detail = Kept, "what guard wrote in it changed since: edit it by hand"
		return out, nil
	}
	if out.Detail == "" {
		out.Detail = "keeping what changed in it since"
	}
	return out, doc.apply(re.Section, now.name, ops)
}

// mergeOps are the edits that give back an entry that changed since wrap:
// each member guard changed, as it was, provided that it is still as
// guard left it (args: provided that they still start with guard's). ok
// is false when a member guard changed was changed since.
func mergeOps(orig, wrapped, now map[string]any) ([]op, bool) {
	keys := map[string]bool{}
	for k := range orig {
		keys[k] = true
	}
	for k := range wrapped {
		keys[k] = true
	}
	order := make([]string, 0, len(keys))
	for k := range keys {
		order = append(order, k)
	}
	// Members given back go where guard's command is, in the order
	// entries usually have them.
	rank := func(k string) int {
		if i := slices.Index([]string{"type", "command", "args", "url", "serverUrl", "httpUrl", "headers"}, k); i >= 0 {
			return i
		}
		return 100
	}
	sort.Slice(order, func(i, j int) bool {
		if ri, rj := rank(order[i]), rank(order[j]); ri != rj {
			return ri < rj
		}
		return order[i] < order[j]
	})
	var inserts, edits, deletes []op
	for _, k := range order {
		o, inO := orig[k]
		w, inW := wrapped[k]
		if inO == inW && equalValues(o, w) {
			continue // not guard's
		}
		n, inN := now[k]
		if k == "args" && inW {
			// guard's arguments come first, the server's own after them,
			// which may have changed.
			ol, _ := stringList(o)
			wl, okW := stringList(w)
			nl, okN := stringList(n)
			if !okW || !inN || !okN || len(wl) < len(ol) {
				return nil, false
			}
			prefix := wl[:len(wl)-len(ol)]
			if !slices.Equal(wl[len(prefix):], ol) || len(nl) < len(prefix) || !slices.Equal(nl[:len(prefix)], prefix) {
				return nil, false
			}
			if !inO && len(nl) == len(prefix) {
				deletes = append(deletes, op{kind: opDelete, key: k})
			} else {
				edits = append(edits, op{kind: opTrim, key: k, value: len(prefix)})
			}
			continue
		}
		if inN != inW || (inN && !equalValues(n, w)) {
			return nil, false
		}
		switch v, ok := opValue(o); {
		case !inO:
			deletes = append(deletes, op{kind: opDelete, key: k})
		case !ok:
			return nil, false
		case inW:
			edits = append(edits, op{kind: opSet, key: k, value: v})
		default:
			inserts = append(inserts, op{kind: opSet, key: k, value: v, before: "command"})
		}
	}
	return slices.Concat(inserts, edits, deletes), true
}

// stringList reads a list of strings (nil reads as an empty one).
func stringList(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, v == nil
	}
	out := make([]string, len(l))
	for i, x := range l {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

// opValue is a decoded value as an edit writes it: a string, a list of
// strings, an object of strings (ok false for anything else).
func opValue(v any) (any, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []any:
		return stringList(v)
	case map[string]any:
		ms := stringMembers(v)
		return ms, len(ms) == len(v)
	}
	return nil, false
}

package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// FilesDigest identifies the configuration on disk: the file, the files
// its include globs match now, and rulesDir's approved.yaml. A person
// applies a change by this digest ("sha256:..."), which every process on
// the database computes alike.
func FilesDigest(file, rulesDir string, cfg Source) string {
	h := sha256.New()
	files := []string{file}
	if rulesDir != "" {
		files = append(files, filepath.Join(rulesDir, ApprovedRulesFile))
	}
	if file != "" {
		files = append(files, includedFiles(file, cfg)...)
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// RulesDigest identifies the contents of an approved-rules file.
func RulesDigest(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Changes lists, one line each, how the policy of next differs from that
// of cur: what a running guard decides by (rules, included ones too, the
// default, the mode, the limits, every server's settings, trust and
// isolation among them), and review.listing, the top-level one and each
// server's: as_served shows the model definitions no one accepted, whose
// descriptions may carry instructions for it, so a server that could
// write the file must not switch it alone. It is empty when a change
// cannot alter a decision: a comment, the rules' lines moving, settings
// read only at start (ui, approval, durability), policy.hide_denied
// (shown or hidden, a denied tool's calls are denied). Learned rules
// (approved.yaml) count unless learned is false: guard wrote them after a
// person's approval.
func Changes(cur, next *Config, curApproved, nextApproved []Rule, learned bool) []string {
	var out []string
	if cur.Policy.Default != next.Policy.Default {
		out = append(out, fmt.Sprintf("policy.default: %s → %s", cur.Policy.Default, next.Policy.Default))
	}
	if cur.Policy.Mode != next.Policy.Mode {
		out = append(out, fmt.Sprintf("policy.mode: %s → %s", cur.Policy.Mode, next.Policy.Mode))
	}
	if cur.Review.Listing != next.Review.Listing {
		out = append(out, fmt.Sprintf("review.listing: %s → %s", cur.Review.Listing, next.Review.Listing))
	}
	out = append(out, ruleChanges("rule", cur.Policy.Rules, next.Policy.Rules)...)
	if learned {
		out = append(out, ruleChanges("learned rule (approved.yaml, not written by guard)", curApproved, nextApproved)...)
	}
	if !reflect.DeepEqual(cur.Limits, next.Limits) {
		out = append(out, "limits changed")
	}
	names := map[string]bool{}
	for n := range cur.Servers {
		names[n] = true
	}
	for n := range next.Servers {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	for _, n := range sorted {
		a, b := cur.Servers[n], next.Servers[n]
		switch {
		case a == nil:
			out = append(out, fmt.Sprintf("servers.%s added", n))
		case b == nil:
			out = append(out, fmt.Sprintf("servers.%s removed", n))
		default:
			if f := changedFields(*a, *b); len(f) > 0 {
				out = append(out, fmt.Sprintf("servers.%s: %s changed", n, strings.Join(f, ", ")))
			}
		}
	}
	return out
}

// changedFields names the fields of two structs that differ (names only:
// a header's value is a secret).
func changedFields[T any](a, b T) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		if !va.Type().Field(i).IsExported() {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, snake(va.Type().Field(i).Name))
		}
	}
	return out
}

// snake writes a Go field name as the configuration does: TrustAnnotations
// → trust_annotations.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if 'A' <= r && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ruleKey is what a rule decides by: not where it was written.
type ruleKey struct {
	Name, Server, Tool, Method, URI, When, Action, Reason, Users, Groups, Approvers string
}

func keyOf(r Rule) ruleKey {
	return ruleKey{r.Name, r.Server, r.Tool, r.Method, r.URI, r.When, r.Action, r.Reason,
		strings.Join(r.Users, "\x00"), strings.Join(r.Groups, "\x00"), approversOf(r)}
}

// approversOf says what a rule's approval needs, "" for one by anyone.
func approversOf(r Rule) string {
	if r.Approvers.IsZero() {
		return ""
	}
	return r.Approvers.String()
}

// ruleChanges lists rules added, removed and changed, by name, and a
// change of their order (the first match wins).
func ruleChanges(what string, cur, next []Rule) []string {
	var out []string
	old := map[string]Rule{}
	for _, r := range cur {
		old[r.Name] = r
	}
	kept := map[string]bool{}
	var curOrder, nextOrder []string
	for _, r := range next {
		o, ok := old[r.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %q added (%s:%d): %s", what, r.Name, r.File, r.Line, describeRule(r)))
		case keyOf(o) != keyOf(r):
			out = append(out, fmt.Sprintf("%s %q changed (%s:%d): %s, was %s", what, r.Name, r.File, r.Line, describeRule(r), describeRule(o)))
		}
		if ok {
			kept[r.Name] = true
			nextOrder = append(nextOrder, r.Name)
		}
	}
	for _, r := range cur {
		if !kept[r.Name] {
			out = append(out, fmt.Sprintf("%s %q removed: %s", what, r.Name, describeRule(r)))
		} else {
			curOrder = append(curOrder, r.Name)
		}
	}
	if !slices.Equal(curOrder, nextOrder) {
		out = append(out, what+"s reordered (the first match wins)")
	}
	return out
}

func describeRule(r Rule) string {
	s := fmt.Sprintf("%s %s server=%s tool=%s", r.Action, r.Method, r.Server, r.Tool)
	if r.URI != "" {
		s += " uri=" + r.URI
	}
	if len(r.Users) > 0 {
		s += " users=" + strings.Join(r.Users, ",")
	}
	if len(r.Groups) > 0 {
		s += " groups=" + strings.Join(r.Groups, ",")
	}
	if r.When != "" {
		s += " when " + r.When
	}
	if a := approversOf(r); a != "" {
		s += " needing " + a
	}
	return s
}

// ContentDigest identifies a configuration by its contents alone: the
// file's and its includes', each named relative to the file's directory,
// so that replicas whose configuration is the same wherever it lives have
// the same digest (FilesDigest names files by their paths, and covers
// approved.yaml). Built-in defaults ("" for file) have their own.
func ContentDigest(file string, cfg Source) string {
	h := sha256.New()
	if file == "" {
		io.WriteString(h, "built-in defaults")
		return "sha256:" + hex.EncodeToString(h.Sum(nil))
	}
	dir := filepath.Dir(file)
	for _, f := range append([]string{file}, includedFiles(file, cfg)...) {
		b, _ := os.ReadFile(f)
		name, err := filepath.Rel(dir, f)
		if err != nil {
			name = f
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// includedFiles are the files the include globs of cfg, read from file,
// match now.
func includedFiles(file string, src Source) []string {
	if src == nil {
		return nil
	}
	cfg := src.PolicyConfig()
	if cfg == nil {
		return nil
	}
	var files []string
	for _, pat := range cfg.Include {
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(filepath.Dir(file), pat)
		}
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	return files
}

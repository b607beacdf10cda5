package guard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Change is one difference between two definitions of a tool.
type Change struct {
	Member string // title, description, inputSchema, outputSchema, annotations.<hint>
	Text   string // for people
	// Weakens is set when the new annotations promise less caution than
	// the old: readOnlyHint false to true, destructiveHint true to false,
	// openWorldHint true to false (defaults filled in).
	Weakens bool
}

// DiffTools lists what changed between an accepted definition and a new
// one, among the members a pin covers.
func DiffTools(old, cur json.RawMessage) []Change {
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(old, &a)
	_ = json.Unmarshal(cur, &b)
	var out []Change
	for _, m := range PinnedMembers() {
		if m == "annotations" {
			continue // hint by hint, below
		}
		if !sameJSON(a[m], b[m]) {
			verb := "changed"
			switch {
			case a[m] == nil:
				verb = "added"
			case b[m] == nil:
				verb = "removed"
			}
			out = append(out, Change{Member: m, Text: m + " " + verb})
		}
	}
	var ha, hb Annotations
	_ = json.Unmarshal(a["annotations"], &ha)
	_ = json.Unmarshal(b["annotations"], &hb)
	ro1, de1, id1, ow1 := ha.Effective()
	ro2, de2, id2, ow2 := hb.Effective()
	hint := func(name string, was, is, weakens bool) {
		if was == is {
			return
		}
		c := Change{Member: "annotations." + name, Text: fmt.Sprintf("%s %t → %t", name, was, is), Weakens: weakens}
		if weakens {
			c.Text += " (weakens the tool's declared caution)"
		}
		out = append(out, c)
	}
	hint("readOnlyHint", ro1, ro2, !ro1 && ro2)
	hint("destructiveHint", de1, de2, de1 && !de2)
	hint("idempotentHint", id1, id2, false)
	hint("openWorldHint", ow1, ow2, ow1 && !ow2)
	if len(out) == 0 && !sameJSON(a["annotations"], b["annotations"]) {
		out = append(out, Change{Member: "annotations", Text: "annotations changed"})
	}
	return out
}

// ChangeText joins changes for a held call's reason.
func ChangeText(cs []Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.Text
	}
	return strings.Join(parts, "; ")
}

func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ca, errA := Canonical(a)
	cb, errB := Canonical(b)
	if errA != nil || errB != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca, cb)
}

// maxDiffCells bounds the table of LineDiff: definitions come from
// servers, and a huge one must not take the memory of guard.
const maxDiffCells = 4 << 20

// LineDiff renders two JSON definitions, indented, as a unified-style
// line diff ("-" old, "+" new, " " both). Lines the two share at the start
// and the end are kept as they are; when what lies between is too large to
// compare line by line, it is shown as all removed, then all added.
func LineDiff(old, cur json.RawMessage) string {
	a, b := indentLines(old), indentLines(cur)
	var sb strings.Builder
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		sb.WriteString("  " + a[head] + "\n")
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	diffLines(&sb, a[head:len(a)-tail], b[head:len(b)-tail])
	for _, l := range a[len(a)-tail:] {
		sb.WriteString("  " + l + "\n")
	}
	return sb.String()
}

// diffLines writes the longest-common-subsequence diff of a and b.
func diffLines(sb *strings.Builder, a, b []string) {
	n, m := len(a), len(b)
	if n*m > maxDiffCells {
		for _, l := range a {
			sb.WriteString("- " + l + "\n")
		}
		for _, l := range b {
			sb.WriteString("+ " + l + "\n")
		}
		return
	}
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			sb.WriteString("  " + a[i] + "\n")
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			sb.WriteString("+ " + b[j] + "\n")
			j++
		default:
			sb.WriteString("- " + a[i] + "\n")
			i++
		}
	}
}

func indentLines(raw json.RawMessage) []string {
	var buf bytes.Buffer
	if len(raw) == 0 {
		return nil
	}
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return strings.Split(string(raw), "\n")
	}
	return strings.Split(buf.String(), "\n")
}

// ReviewReason says why a call to a tool whose definition r waits for a
// person is held: what its description scan found, that the tool is new,
// or what changed since accepted (the definition last accepted, or nil).
// current is the definition under review.
func ReviewReason(r *Review, current, accepted *Tool) string {
	switch r.Cause {
	case CauseFlagged:
		return "its descriptions carry instructions aimed at the model: " + FlagText(r.Flags)
	case CauseNew:
		return "a new tool since the server's first listing (new_tools: approve)"
	}
	why := "the tool's definition changed since it was accepted"
	if accepted != nil && current != nil {
		if cs := DiffTools(accepted.Def, current.Def); len(cs) > 0 {
			why += ": " + ChangeText(cs)
		}
	}
	return why
}

// FlagText renders the findings of the description scan for people.
func FlagText(flags []Flag) string {
	parts := make([]string, 0, len(flags))
	for _, f := range flags {
		parts = append(parts, fmt.Sprintf("%s in %s (%s)", f.Kind, f.Where, f.Evidence))
	}
	return strings.Join(parts, "; ")
}

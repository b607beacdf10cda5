package clients

import (
	"bytes"
	"fmt"
	"strings"
)

// Diff is the change as a unified diff of the file (empty when it changes
// nothing).
func (c *Change) Diff() string {
	if !c.Changed() {
		return ""
	}
	return unifiedDiff(c.File.Path, string(c.Before), string(c.After))
}

// unifiedDiff compares two texts line by line, with three lines of
// context. The lines that both share at the start and at the end are
// set aside first: an edit of guard's changes a few entries of what may
// be a long file (Claude Code's keeps every project's history), and what
// is left between is small enough to compare every line with every line.
func unifiedDiff(name, a, b string) string {
	al, bl := splitLines(a), splitLines(b)
	pre := 0
	for pre < len(al) && pre < len(bl) && al[pre] == bl[pre] {
		pre++
	}
	suf := 0
	for suf < len(al)-pre && suf < len(bl)-pre && al[len(al)-1-suf] == bl[len(bl)-1-suf] {
		suf++
	}
	ops := lcsOps(al[pre:len(al)-suf], bl[pre:len(bl)-suf])
	// Every line as an edit: ' ' kept, '-' removed, '+' added, with its
	// line numbers in a and b.
	type line struct {
		op   byte
		text string
		ai   int
		bi   int
	}
	var lines []line
	for i := 0; i < pre; i++ {
		lines = append(lines, line{' ', al[i], i, i})
	}
	ai, bi := pre, pre
	for _, o := range ops {
		switch o {
		case ' ':
			lines = append(lines, line{' ', al[ai], ai, bi})
			ai++
			bi++
		case '-':
			lines = append(lines, line{'-', al[ai], ai, bi})
			ai++
		case '+':
			lines = append(lines, line{'+', bl[bi], ai, bi})
			bi++
		}
	}
	for i := 0; i < suf; i++ {
		lines = append(lines, line{' ', al[ai], ai, bi})
		ai++
		bi++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s (guard)\n", name, name)
	const context = 3
	for i := 0; i < len(lines); {
		if lines[i].op == ' ' {
			i++
			continue
		}
		// A hunk: from context lines before this change to context lines
		// after the last change that is no more than 2*context away.
		start := max(0, i-context)
		end := i
		for j := i; j < len(lines); j++ {
			if lines[j].op != ' ' {
				end = j
			} else if j-end > 2*context {
				break
			}
		}
		end = min(len(lines), end+context+1)
		var na, nb int
		for _, l := range lines[start:end] {
			if l.op != '+' {
				na++
			}
			if l.op != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(lines[start].ai, na), hunkRange(lines[start].bi, nb))
		for _, l := range lines[start:end] {
			out.WriteByte(l.op)
			out.WriteString(l.text)
			if !strings.HasSuffix(l.text, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// maxDiffCells bounds the table of lcsOps (4 bytes a cell).
const maxDiffCells = 4 << 20

// splitLines splits after each line break, keeping it.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// lcsOps is the shortest edit from a to b by a longest common
// subsequence: ' ' for a line of both, '-' for one of a only, '+' for
// one of b only.
func lcsOps(a, b []string) []byte {
	n, m := len(a), len(b)
	if n*m > maxDiffCells {
		// Too far apart to compare in little memory: all of a goes, all
		// of b comes, which is still a correct diff.
		return append(bytes.Repeat([]byte{'-'}, n), bytes.Repeat([]byte{'+'}, m)...)
	}
	// l[i][j] is the length of the longest common subsequence of a[i:]
	// and b[j:].
	l := make([][]int32, n+1)
	for i := range l {
		l[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var ops []byte
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, ' ')
			i++
			j++
		case l[i+1][j] >= l[i][j+1]:
			ops = append(ops, '-')
			i++
		default:
			ops = append(ops, '+')
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, '-')
	}
	for ; j < m; j++ {
		ops = append(ops, '+')
	}
	return ops
}

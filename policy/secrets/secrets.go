// Package secrets finds and masks secret values (cloud keys, tokens, private
// keys) in text, and in the string values of JSON documents, before tool
// calls are recorded or results are passed on.
//
// Every built-in pattern starts with a literal (AKIA, ghp_, xoxb-, eyJ,
// -----BEGIN, ...), or is found from a byte it holds: the "=" or ":" after
// a secret's name (password=..., "token": "..."), the "@" that ends a
// URL's password. Text is first searched for those bytes with
// strings.IndexByte, and a pattern is matched only where one occurs,
// anchored there; text without any of them is returned as it is, without
// allocating.
//
// A masked value becomes "[REDACTED:<kind>]". Context that identifies a
// value (the word "Bearer", "aws_secret_access_key=") is kept. Masking is
// idempotent: no pattern matches a mask, so masking masked text again
// changes nothing.
package secrets

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// PatternKind is the kind in the mask of a configured (extra) pattern:
// "[REDACTED:pattern]".
const PatternKind = "pattern"

// SecretGroup names the part of a configured pattern that is masked: when
// a pattern has a group (?P<secret>...), only that group's text is masked
// and the rest of the match is kept, as in `password=(?P<secret>\S+)`.
// Without one the whole match is masked.
const SecretGroup = "secret"

// Masker masks built-in and configured patterns. Immutable after New; safe
// for concurrent use. A nil *Masker masks the built-in patterns.
type Masker struct {
	pats  []*pattern
	extra int // how many of pats are configured or values; they come last
	// valuesOnly: no built-in pattern, only exact values (Values).
	valuesOnly bool
}

// MinValue is the shortest exact value a Masker masks: a shorter one
// would mask ordinary text ("admin", a port number) wherever it occurs.
const MinValue = 8

// WithValues returns a Masker that also masks each of values exactly,
// wherever it occurs, as "[REDACTED:<kind>]": secrets whose values are
// known rather than their shapes. Values shorter than MinValue, and
// duplicates, are left out. m is not changed.
func (m *Masker) WithValues(kind string, values []string) *Masker {
	out := &Masker{pats: append([]*pattern(nil), m.patterns()...)}
	if m != nil {
		out.extra, out.valuesOnly = m.extra, m.valuesOnly
	}
	for _, v := range values {
		if len(v) < MinValue || slices.ContainsFunc(out.pats, func(p *pattern) bool { return p.lit == v }) {
			continue
		}
		out.pats = append(out.pats, literal(kind, v))
		out.extra++
	}
	return out
}

// Values returns a Masker of exact values only, without the built-in
// patterns (see WithValues).
func Values(kind string, values []string) *Masker {
	return (&Masker{pats: []*pattern{}, valuesOnly: true}).WithValues(kind, values)
}

// probeLen bounds the probe of an exact value.
const probeLen = 16

// Len is how many patterns and values m masks.
func (m *Masker) Len() int { return len(m.patterns()) }

// literal is the pattern of one exact value. Its probe, what a text must
// hold to be searched, is the value's start that JSON writes as it is (so
// that an escaped character later in the value does not hide it from the
// quick look), at most probeLen bytes (which the substring search finds
// with vector instructions).
func literal(kind, v string) *pattern {
	p := &pattern{kind: kind, mask: maskFor(kind), lit: v}
	n := 0
	for n < len(v) && n < probeLen && jsonPlain(v[n:n+1]) {
		n++
	}
	p.prefix, p.probe = v[:n], []byte(v[:n])
	return p
}

// New returns a Masker with the built-in patterns plus extra (Go regexp
// syntax, RE2). A pattern that does not compile, or that matches empty
// text, is an error naming the pattern and why.
func New(extra []string) (*Masker, error) {
	m := &Masker{pats: make([]*pattern, 0, len(builtins)+len(extra)), extra: len(extra)}
	m.pats = append(m.pats, builtins...)
	for i, src := range extra {
		p, err := compileExtra(src)
		if err != nil {
			return nil, fmt.Errorf("secrets: extra pattern %d %q: %w", i+1, src, err)
		}
		m.pats = append(m.pats, p)
	}
	return m, nil
}

// Kinds lists the built-in pattern kinds (for docs and tests), in the
// order in which they win a tie: when two matches start at the same place
// the longer one is masked, and between equally long ones the kind listed
// first.
func Kinds() []string {
	kinds := make([]string, len(builtins))
	for i, p := range builtins {
		kinds[i] = p.kind
	}
	return kinds
}

// Mask returns s with every match replaced by a mask and the number of
// matches. The mask is "[REDACTED:<kind>]", e.g. "[REDACTED:aws_access_key]",
// "[REDACTED:pattern]" for configured ones. When s contains no match it
// returns s itself (no allocation) and 0.
//
// Matches do not overlap: the one that starts first is masked (the longest
// there, or the first in Kinds order), and the search goes on after it.
func (m *Masker) Mask(s string) (string, int) {
	if !mayMatch(m, s) {
		return s, 0
	}
	return m.mask(s)
}

// patterns is the masker's list, the built-ins for a nil (or zero)
// masker.
func (m *Masker) patterns() []*pattern {
	if m == nil || m.pats == nil {
		return builtins
	}
	return m.pats
}

// span is a pattern's next match in a string: it starts at start (the
// pattern's context, such as "Bearer ", comes first), and [from, to) is
// what is masked.
type span struct {
	start, from, to int
	ok              bool
}

func (m *Masker) mask(s string) (string, int) {
	pats := m.patterns()
	var buf [24]span
	var next []span
	if len(pats) > len(buf) {
		next = make([]span, len(pats))
	} else {
		next = buf[:len(pats)]
	}
	found := false
	for i, p := range pats {
		next[i] = p.find(s, 0)
		found = found || next[i].ok
	}
	if !found {
		return s, 0
	}
	var b strings.Builder
	b.Grow(len(s))
	pos, n := 0, 0
	for {
		best := -1
		for i := range next {
			c := next[i]
			if !c.ok {
				continue
			}
			if best < 0 || c.from < next[best].from || c.from == next[best].from && c.to > next[best].to {
				best = i
			}
		}
		if best < 0 {
			break
		}
		c := next[best]
		b.WriteString(s[pos:c.from])
		b.WriteString(pats[best].mask)
		pos = c.to
		n++
		// A match that begins at or before pos is searched again from pos,
		// as it would be when the masked text is masked again, where the
		// text before pos ends with the mask's "]".
		for i := range next {
			if next[i].ok && next[i].start <= pos {
				next[i] = pats[i].find(s, pos)
			}
		}
	}
	b.WriteString(s[pos:])
	return b.String(), n
}

// pattern is one kind of secret.
type pattern struct {
	kind string
	mask string // "[REDACTED:" + kind + "]"

	// A built-in pattern. Its literal holds one of the anchors (one byte,
	// or one in each case), at least lead bytes from the start; checkS
	// and checkB, given an anchor's offset, return where the literal
	// starts, or -1, in text held as a string or as bytes. match tries a
	// match there, in text that starts at the literal, and returns what
	// is masked; when there is none, to may say that no match starts
	// before it either. wordStart: a match does not follow a letter,
	// digit or "_" (the regexp's leading \b).
	anchors   string
	lead      int
	checkS    func(s string, i int) int
	checkB    func(b []byte, i int) int
	match     func(s string) (from, to int, ok bool)
	wordStart bool

	// A configured pattern: its regexp, the group that is masked and a
	// literal every match starts with ("" when there is none, or when it
	// holds a character JSON may write as an escape).
	re     *regexp.Regexp
	group  int
	prefix string

	// An exact value (WithValues), found with strings.Index; its prefix
	// (also as bytes: probe) is what a text must hold to be searched.
	lit   string
	probe []byte
}

// find returns p's first match in s that starts at or after from. Text
// before from is out of sight, as if s started there: a match at from
// counts as starting a word.
func (p *pattern) find(s string, from int) span {
	if p.lit != "" {
		if from > len(s) {
			return span{}
		}
		j := strings.Index(s[from:], p.lit)
		if j < 0 {
			return span{}
		}
		return span{start: from + j, from: from + j, to: from + j + len(p.lit), ok: true}
	}
	if p.re != nil {
		return p.findRegexp(s, from)
	}
	// The next offsets of the anchors, in one case and the other; -2:
	// not looked for yet, -1: there are none.
	a, b := p.anchors[0], p.anchors[len(p.anchors)-1]
	na, nb := -2, -2
	if a == b {
		nb = -1
	}
	for i := from + p.lead; ; {
		if na != -1 && na < i {
			na = indexByteFrom(s, i, a)
		}
		if nb != -1 && nb < i {
			nb = indexByteFrom(s, i, b)
		}
		c := na
		if c < 0 || nb >= 0 && nb < c {
			c = nb
		}
		if c < 0 {
			return span{}
		}
		i = c + 1
		// The check reads nothing before from, out of sight (a name read
		// backwards stops there).
		h := p.checkS(s[from:], c-from)
		if h >= 0 {
			h += from
		}
		if h < from || p.wordStart && h > from && isWordByte(s[h-1]) {
			continue
		}
		f, t, ok := p.match(s[h:])
		if ok {
			return span{start: h, from: h + f, to: h + t, ok: true}
		}
		i = max(i, h+t+p.lead) // no match starts before h+t
	}
}

func (p *pattern) findRegexp(s string, from int) span {
	for from <= len(s) {
		loc := p.re.FindStringSubmatchIndex(s[from:])
		if loc == nil {
			break
		}
		f, t := loc[2*p.group], loc[2*p.group+1]
		if f >= 0 && t > f {
			return span{start: from + loc[0], from: from + f, to: from + t, ok: true}
		}
		// Empty: go on after the match, or one byte further when the
		// match is empty too.
		if loc[1] > loc[0] {
			from += loc[1]
		} else {
			from += loc[0] + 1
		}
	}
	return span{}
}

// compileExtra compiles a configured pattern.
func compileExtra(src string) (*pattern, error) {
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, err
	}
	if re.MatchString("") {
		return nil, fmt.Errorf("matches empty text")
	}
	p := &pattern{kind: PatternKind, mask: maskFor(PatternKind), re: re}
	if i := re.SubexpIndex(SecretGroup); i > 0 {
		p.group = i
	}
	if prefix, _ := re.LiteralPrefix(); jsonPlain(prefix) {
		p.prefix = prefix
	}
	return p, nil
}

// jsonPlain reports whether s is not empty and is written in JSON text as
// it is (printable ASCII but '"' and '\\'), or as \/ or a \u escape, which
// MaskJSON reads before looking for literals.
func jsonPlain(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func maskFor(kind string) string { return "[REDACTED:" + kind + "]" }

// isWordByte reports whether c is a word character for \b: [0-9A-Za-z_].
func isWordByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
}

// mayMatch reports whether some pattern of m may match in s: false means
// Mask would change nothing. It does not allocate.
func mayMatch[T text](m *Masker, s T) bool {
	if m != nil && m.valuesOnly {
		return mayMatchExtra(m, s)
	}
	for _, g := range anchorGroups {
		for i := indexByteFrom(s, 0, g.anchor); i >= 0; i = indexByteFrom(s, i+1, g.anchor) {
			for _, p := range g.pats {
				if check(p, s, i) >= 0 {
					return true
				}
			}
		}
	}
	return m != nil && mayMatchExtra(m, s)
}

// mayMatchExtra is mayMatch for the configured patterns and the values.
func mayMatchExtra[T text](m *Masker, s T) bool {
	for _, p := range m.pats[len(m.pats)-m.extra:] {
		switch {
		case p.prefix == "":
			return true
		case p.lit != "":
			if indexText(s, p.prefix, p.probe) >= 0 {
				return true
			}
		case indexLit(s, 0, p.prefix, 0) >= 0:
			return true
		}
	}
	return false
}

// check calls p's check function for the type of s.
func check[T text](p *pattern, s T, i int) int {
	switch v := any(s).(type) {
	case string:
		return p.checkS(v, i)
	case []byte:
		return p.checkB(v, i)
	}
	return -1
}

package scan

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A rule flags the normalised text (see fold: lower case, one space for any
// run of whitespace, no invisible characters, curly quotes and fullwidth
// ASCII folded) where re matches. The text must first hold one word of each
// need list: a cheap filter, since Go's regexps are slow to scan with.
type rule struct {
	kind string
	need [][]string
	re   *regexp.Regexp   // the evidence starts where this matches
	and  []*regexp.Regexp // and these must match somewhere too
}

var rules = []rule{
	{KindHiddenTag, [][]string{{"<", "["}, {"<!--", "[//]", "|>", "sys", "inst", "important", "hidden", "critical", "urgent", "assistant", "note", "ai", "admin", "llm", "model"}}, re(
		`<!--|\[//\]: ?#|<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id)\|>|<</?sys>>`,
		`\[/?(?:inst|system|sys|important|instructions?|admin|assistant)\]`,
		`</? ?(?:important|system|sys|instructions?|system[_-]?(?:prompt|message|instructions?|reminder|notes?)|hidden|critical|urgent|assistant|ai[_-]?(?:instructions?|only)|note[_-]?to[_-]?(?:ai|model|assistant|llm)|(?:llm|ai|model|assistant)[_-]?(?:notes?|instructions?))(?: [^<>]*)? ?/?>`), nil},

	{KindOverride, [][]string{{"ignor", "disregard", "forget", "overrid"}}, re(
		`\b(?:ignore|disregard|forget) (?:(?:all|any|every|the|your|of|these|those|my) ){0,3}(?:previous|prior|earlier|above|preceding|former|original|existing|other|system|safety|current) (?:\w+ )?(?:instructions?|prompts?|directions|guidelines|directives|guidance|commands)\b`,
		`\b(?:ignore|disregard|forget) (?:all|any|every|your) (?:instructions|prompts|directions|guidelines|directives|guidance)\b`,
		`\boverride (?:all |any |the |your )?(?:previous|prior|earlier|above|system|safety) (?:instructions?|prompts?|guidelines|rules)\b`), nil},
	{KindOverride, [][]string{{"mention", "tell"}, {"not", "n't", "dont", "never"}}, re(
		`\b(?:do not|don'?t|never|must not|mustn'?t|should not|shouldn'?t) (?:ever )?(?:mention|tell)\b`), nil},
	{KindOverride, [][]string{{"user"}, {"not", "n't", "dont", "never", "without", "hide", "conceal", "keep"}}, re(
		`\b(?:do not|don'?t|never|must not|mustn'?t|should not|shouldn'?t) (?:ever )?(?:inform|notify|alert|warn|show|reveal|disclose|say|explain|let|ask|bother) (?:this to |it to |to )?(?:the )?users?\b`,
		`\bwithout (?:telling|informing|notifying|alerting|asking|showing) (?:the )?users?\b`,
		`\b(?:hide|conceal|keep) (?:this|it|that|these) (?:\w+ )?from (?:the )?users?\b`,
		`\bthe user (?:must|should) (?:not|never) (?:know|see|notice|find out|be told)\b`), nil},
	{KindOverride, [][]string{{"before "}, {"tool"}}, re(
		`\bbefore (?:using|calling|invoking|running|executing) (?:this|any|the|other|each|every) (?:\w+ )?tools?,? (?:you )?(?:must|need to|have to|are required to)\b`), nil},
	{KindOverride, [][]string{{"you must always"}}, re(`\byou must always\b`), nil},
	{KindOverride, [][]string{{"system prompt"}}, re(
		`\b(?:your|the (?:assistant|model|ai|llm)'?s?) system prompt\b`,
		`\b(?:reveal|print|output|repeat|show|leak|include|send|override|ignore|disregard) (?:the |your |its )?system prompt\b`,
		`\bnew system prompt\b|\bsystem prompt override\b`), nil},
	{KindOverride, [][]string{{"instruction"}, {":"}}, re(`\b(?:new|updated|additional|real|actual|hidden|secret) instructions? ?:`), nil},

	// A verb in its base (imperative) form, then in the same clause a
	// secret file or directory.
	{KindSecretAccess, [][]string{{".ssh", ".aws", ".env", ".npmrc", ".pypirc", ".netrc", ".git-credentials", ".gnupg", ".kube", ".docker", ".cursor", "_history", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "mcp.json", "claude_desktop_config", "credentials.json", "/etc/passwd", "/etc/shadow", "wallet.dat"}}, re(
		`\b(?:` + readVerbs + `|list|` + sendVerbs + `)\b` + sameClause + `(?:` +
			`(?:^|[\s'"` + "`" + `(/~])\.(?:ssh|aws|envrc|npmrc|pypirc|netrc|git-credentials|gnupg|kube|docker|cursor|bash_history|zsh_history)\b` +
			`|(?:^|[\s'"` + "`" + `(/~])\.env(?:\.(?:local|prod\w*|dev\w*|staging|test))?(?:[^.\w-]|\. |\.?$)` + // not .env.example
			`|\bid_(?:rsa|dsa|ecdsa|ed25519)\b|\bmcp\.json\b|claude_desktop_config|\bcredentials\.json\b|/etc/(?:passwd|shadow)\b|\bwallet\.dat\b)`), nil},
	// A verb, then in the same clause a kind of secret (or the conversation),
	// in a text with a verb of sending and a destination: a tool whose purpose
	// is managing keys or passwords does not ask to send them somewhere.
	{KindSecretAccess, [][]string{
		{"environment variable", "env var", "key", "password", "passphrase", "secret", "credential", "token", "seed phrase", "mnemonic", "cookie", "conversation", "chat"},
		{"send", "pass", "include", "attach", "append", "upload", "post", "forward", "share", "exfiltrate", "leak", "embed", "insert", "submit", "transmit", "email"},
		{"param", "arg", "field", "side", "metadata", "header", "query string", "url", "http", "@"},
	}, re(
		`\b(?:` + readVerbs + `|` + sendVerbs + `)\b` + sameClause + `\b(?:environment variables?|env vars?|api[ _-]?keys?|private[ _-]?keys?|ssh[ _-]?keys?|secret[ _-]?keys?|passwords?|passphrases?|secrets|credentials|(?:access|auth|bearer|session|refresh)[ _-]?tokens?|seed phrases?|mnemonics?|cookies|(?:conversation|chat) (?:history|log|transcript)|(?:whole|entire|full) (?:conversation|chat))\b`),
		[]*regexp.Regexp{
			re(`\b(?:` + sendVerbs + `)\b`),
			re(`\b(?:parameters?|params?|arguments?|args?|fields?|sidenote|side note|metadata|headers?|query string|url)\b|https?://|[a-z0-9._-]+@[a-z0-9-]+\.[a-z]`),
		}},

	{KindCrossTool, [][]string{{"when"}, {"tool is"}}, re(
		`\bwhen(?:ever)? this tool is (?:available|present|loaded|installed|enabled|active|connected)\b`,
		`\bwhen(?:ever)? (?:you (?:use|call) |using |calling )?(?:the |any )?`+toolName+` tool is (?:used|called|invoked|run|executed)\b`), nil},
	{KindCrossTool, [][]string{{"instead of", "rather than"}, {" tool"}}, re(
		`\b(?:instead of|rather than) (?:using |calling )?(?:the |any )?` + toolName + ` tool\b`), nil},
	{KindCrossTool, [][]string{{" tool must", " tool should", " tool shall", " tool has to", " tool needs to"}}, re(
		`\bthe ` + toolName + ` tool (?:must|should|shall|has to|needs to) (?:always |now |also |only )?(?:send|forward|include|add|cc|bcc|redirect|route|copy|use)\b`), nil},
	{KindCrossTool, [][]string{{"other tool"}}, re(`\b(?:all )?other tools? (?:must|should)\b`), nil},
}

const (
	readVerbs  = `read|cat|open|load|dump|print|output|collect|extract|gather|retrieve|fetch|get|grab|steal|access|copy`
	sendVerbs  = `send|pass|include|attach|append|upload|post|forward|share|exfiltrate|leak|embed|insert|submit|transmit|email`
	sameClause = `(?:[^.!?;]|[.!?]\S)*?` // no full stop, "!", "?" or ";" (a dot inside a name is fine)
	toolName   = `[\w.` + "`" + `'"-]+`
)

// re compiles alternatives into one regexp.
func re(alts ...string) *regexp.Regexp { return regexp.MustCompile(strings.Join(alts, "|")) }

func (r *rule) match(n string) []int {
	for _, words := range r.need {
		if !slices.ContainsFunc(words, func(w string) bool { return strings.Contains(n, w) }) {
			return nil
		}
	}
	loc := r.re.FindStringIndex(n)
	for _, a := range r.and {
		if loc != nil && !a.MatchString(n) {
			return nil
		}
	}
	return loc
}

type scanner struct {
	others []otherTool
}

type otherTool struct {
	name  string // normalised
	plain bool   // letters only: counts only where written as a tool name
}

func otherTools(names []string, self string) []otherTool {
	self = norm(self)
	var out []otherTool
	for _, n := range names {
		f := strings.TrimSpace(norm(n))
		if len(f) < 3 || f == self {
			continue
		}
		plain := true
		for i, r := range n {
			if !unicode.IsLetter(r) || i > 0 && unicode.IsUpper(r) {
				plain = false
			}
		}
		out = append(out, otherTool{f, plain})
	}
	return out
}

func (sc *scanner) text(where, s string) []Flag {
	var flags []Flag
	add := func(kind, ev string) { flags = append(flags, Flag{kind, where, ev}) }

	// Phrase rules: the earliest match of each kind.
	type hit struct {
		kind string
		at   int // in n
	}
	var hits []hit
	n := norm(s)
	for i := range rules {
		if loc := rules[i].match(n); loc != nil {
			hits = append(hits, hit{rules[i].kind, loc[0]})
		}
	}
	for _, o := range sc.others {
		if loc := o.find(n); loc != nil {
			hits = append(hits, hit{KindCrossTool, loc[0]})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if c := strings.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return a.at - b.at
	})
	for i, h := range hits {
		if i == 0 || hits[i-1].kind != h.kind {
			add(h.kind, excerpt("", s[rawOffset(s, h.at):], MaxEvidence))
		}
	}

	if i := firstInvisible(s); i >= 0 {
		start := max(0, i-24)
		for start > 0 && !utf8.RuneStart(s[start]) {
			start--
		}
		add(KindInvisible, excerpt("", s[start:], MaxEvidence))
	}
	if start, end, ok := whitespaceRun(s); ok {
		add(KindWhitespace, excerpt(fmt.Sprintf("[%d whitespace characters] ", utf8.RuneCountInString(s[start:end])), s[end:], MaxEvidence))
	}
	slices.SortFunc(flags, func(a, b Flag) int { return strings.Compare(a.Kind, b.Kind) })
	return flags
}

// find returns where o is mentioned in the normalised text n, or nil.
func (o otherTool) find(n string) []int {
	for off := 0; off < len(n); {
		i := strings.Index(n[off:], o.name)
		if i < 0 {
			return nil
		}
		a, b := off+i, off+i+len(o.name)
		off = a + 1
		var before, after byte
		if a > 0 {
			before = n[a-1]
		}
		if b < len(n) {
			after = n[b]
		}
		if identByte(before) || identByte(after) {
			continue
		}
		if !o.plain || strings.ContainsRune("`'\"", rune(before)) && before != 0 && after == before ||
			strings.HasPrefix(n[b:], " tool") || after == '(' {
			return []int{a, b}
		}
	}
	return nil
}

func identByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// hidden reports characters that do not show, or that change how text
// around them shows: format (Cf) and private-use (Co) characters, controls
// other than whitespace, variation selectors, the combining grapheme joiner
// and the Hangul fillers. fold drops them.
func hidden(r rune) bool {
	switch {
	case r < 0x80:
		return r < 0x20 && !unicode.IsSpace(r) || r == 0x7f
	case unicode.IsSpace(r):
		return false
	case isVariationSelector(r), r == 0x34f, r == 0x115f, r == 0x1160, r == 0x3164, r == 0xffa0:
		return true
	}
	return unicode.In(r, unicode.Cf, unicode.Co, unicode.Cc)
}

func isVariationSelector(r rune) bool {
	return 0xfe00 <= r && r <= 0xfe0f || 0xe0100 <= r && r <= 0xe01ef
}

// firstInvisible returns the offset of the first character of s that hides
// text, or -1. Not counted: a zero-width (non-)joiner between two visible
// non-ASCII characters (emoji sequences, Persian, Indic scripts), a single
// variation selector (emoji presentation), and the tag characters of an
// emoji subdivision flag (U+1F3F4, two to six tag letters, U+E007F).
func firstInvisible(s string) int {
	prev := rune(0)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == 0x1f3f4:
			if n := flagTags(s[i+w:]); n > 0 {
				w += n
			}
		case r == 0x200c || r == 0x200d:
			next, _ := utf8.DecodeRuneInString(s[i+w:])
			if !joinable(prev) || !joinable(next) {
				return i
			}
		case isVariationSelector(r):
			if isVariationSelector(prev) {
				return i
			}
		case hidden(r):
			return i
		}
		prev = r
		i += w
	}
	return -1
}

func joinable(r rune) bool {
	return r >= 0x80 && r != utf8.RuneError && !unicode.IsSpace(r) && (!hidden(r) || isVariationSelector(r))
}

// flagTags returns the length of the tag sequence of a subdivision flag at
// the start of s, or 0.
func flagTags(s string) int {
	for i, n := 0, 0; i < len(s); n++ {
		r, w := utf8.DecodeRuneInString(s[i:])
		i += w
		switch {
		case r == 0xe007f && n >= 2:
			return i
		case n >= 6 || !(0xe0030 <= r && r <= 0xe0039 || 0xe0061 <= r && r <= 0xe007a):
			return 0
		}
	}
	return 0
}

// whitespaceRun finds the first run of whitespace followed by more text that
// holds five line breaks, or ends in 20 spaces within a line (40 where it
// indents a line). A run next to "|" (markdown table padding) does not
// count.
func whitespaceRun(s string) (start, end int, ok bool) {
	start, breaks, tail := -1, 0, 0
	for i, r := range s {
		if unicode.IsSpace(r) {
			if start < 0 {
				start, breaks, tail = i, 0, 0
			}
			switch r {
			case '\n', '\v', '\f', 0x85, 0x2028, 0x2029:
				breaks, tail = breaks+1, 0
			case '\r':
			default:
				tail++
			}
			continue
		}
		if start >= 0 && r != '|' && (start == 0 || s[start-1] != '|') {
			limit := 20
			if breaks > 0 || start == 0 {
				limit = 40
			}
			if breaks >= 5 || tail >= limit {
				return start, i, true
			}
		}
		start = -1
	}
	return 0, 0, false
}

// fold calls emit for each character of s as the phrase rules see it, with
// its offset in s: invisible characters dropped, a run of whitespace as one
// space, curly quotes straight, fullwidth ASCII as ASCII, in lower case.
func fold(s string, emit func(r rune, at int)) {
	space := false
	for i, r := range s {
		switch {
		case ' ' < r && r < 0x7f: // most text
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			}
			space = false
			emit(r, i)
			continue
		case unicode.IsSpace(r):
			if !space {
				emit(' ', i)
			}
			space = true
			continue
		case hidden(r):
			continue
		case r == 0x2018 || r == 0x2019:
			r = '\''
		case r == 0x201c || r == 0x201d:
			r = '"'
		case 0xff01 <= r && r <= 0xff5e:
			r -= 0xfee0
		}
		space = false
		emit(unicode.ToLower(r), i)
	}
}

func norm(s string) string {
	b := make([]byte, 0, len(s))
	fold(s, func(r rune, _ int) { b = utf8.AppendRune(b, r) })
	return string(b)
}

// rawOffset returns the offset in s of the character at offset k of norm(s).
func rawOffset(s string, k int) int {
	n, at := 0, len(s)
	fold(s, func(r rune, i int) {
		if n == k {
			at = i
		}
		n += utf8.RuneLen(r)
	})
	return at
}

// excerpt returns prefix and then s, with invisible characters, controls
// and whitespace other than the space as \u{XXXX} and bytes that are not
// UTF-8 as \x{XX}, cut with "…" to at most limit bytes.
func excerpt(prefix, s string, limit int) string {
	const ellipsis = "…"
	b := []byte(prefix)
	cut := len(b)
	for i := 0; i < len(s) && len(b) <= limit; {
		if len(b) <= limit-len(ellipsis) {
			cut = len(b)
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			b = fmt.Appendf(b, `\x{%02X}`, s[i])
		case hidden(r) || r == 0x200c || r == 0x200d || r != ' ' && unicode.IsSpace(r):
			b = fmt.Appendf(b, `\u{%X}`, r)
		default:
			b = append(b, s[i:i+w]...)
		}
		i += w
	}
	if len(b) <= limit {
		return string(b)
	}
	return string(b[:cut]) + ellipsis
}

package wire

// MaxDepth is how deeply a message's arrays and objects may nest (the
// message itself is the first level). go-sdk's peers read at most 1,000
// levels and end the session on a deeper message; no message of the
// protocol needs more than a few dozen.
const MaxDepth = 512

// span is where one member of a message's top-level object lies: its name
// (quoted) is b[keyStart:keyEnd], its value b[valueStart:valueEnd].
type span struct {
	keyStart, keyEnd, valueStart, valueEnd int
}

// valid reports whether b is one JSON value (RFC 8259) with only whitespace
// around it: what encoding/json.Valid accepts (strings are not checked for
// UTF-8), found in one pass that moves through strings and numbers by loops
// of their own rather than a state change per byte. The members of a
// top-level object are appended to top, in order, for Parse to read without
// a second pass.
//
// A value nested deeper than MaxDepth makes b deep: such a message is
// refused whatever it holds, so that value is only skipped (its brackets
// counted, its strings passed), not validated, and the stack stays bounded.
// The walk goes on after it, to find the top-level members that follow (a
// response may put its id after its result).
func valid(b []byte, top []span) (_ []span, ok, deep bool) {
	var small [64]bool
	open := small[:0] // the containers the value at i is in: true for an object
	i := skipWS(b, 0)
	for {
		// A value begins at i.
		if i >= len(b) {
			return top, false, deep
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(open) == MaxDepth {
				if i = skipContainer(b, i); i < 0 {
					return top, false, deep
				}
				deep = true
				break
			}
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == closer(c) {
				i++ // empty
				break
			}
			open = append(open, c == '{')
			if c == '{' {
				if i, top = validKey(b, i, len(open) == 1, top); i < 0 {
					return top, false, deep
				}
			}
			continue
		case '"':
			if i = validString(b, i); i < 0 {
				return top, false, deep
			}
		case 't':
			if i = literal(b, i, "true"); i < 0 {
				return top, false, deep
			}
		case 'f':
			if i = literal(b, i, "false"); i < 0 {
				return top, false, deep
			}
		case 'n':
			if i = literal(b, i, "null"); i < 0 {
				return top, false, deep
			}
		default:
			if i = validNumber(b, i); i < 0 {
				return top, false, deep
			}
		}
		// A value ended at i: close what it ends, until the next value.
		for {
			if len(open) == 1 && open[0] {
				top[len(top)-1].valueEnd = i // a top-level member's
			}
			i = skipWS(b, i)
			if len(open) == 0 {
				return top, i == len(b), deep
			}
			if i >= len(b) {
				return top, false, deep
			}
			obj := open[len(open)-1]
			if b[i] == ',' {
				i = skipWS(b, i+1)
				if obj {
					if i, top = validKey(b, i, len(open) == 1, top); i < 0 {
						return top, false, deep
					}
				}
				break
			}
			if (obj && b[i] != '}') || (!obj && b[i] != ']') {
				return top, false, deep
			}
			open = open[:len(open)-1]
			i++
		}
	}
}

// skipContainer returns the index after the array or object at b[i],
// counting brackets of either kind and passing strings, or -1 when b ends
// first. It does not validate: skipValue uses it on valid JSON, and valid
// on what is nested too deep to be read.
func skipContainer(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = skipString(b, i)
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return -1
}

func closer(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

// validKey checks a member name and its colon at b[i] and returns where its
// value begins, or -1. A member of the top-level object (atTop) is
// appended to top.
func validKey(b []byte, i int, atTop bool, top []span) (int, []span) {
	if i >= len(b) || b[i] != '"' {
		return -1, top
	}
	ks := i
	if i = validString(b, i); i < 0 {
		return -1, top
	}
	ke := i
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1, top
	}
	i = skipWS(b, i+1)
	if atTop {
		top = append(top, span{keyStart: ks, keyEnd: ke, valueStart: i})
	}
	return i, top
}

// validString checks the string at b[i] == '"' and returns the index after
// it, or -1.
func validString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		i = indexSpecial(b, i)
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validNumber checks the number at b[i] and returns the index after it, or
// -1: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(b, i); i < 0 {
			return -1
		}
	}
	return i
}

// digits returns the index after the digits at b[i], or -1 when there is
// none.
func digits(b []byte, i int) int {
	start := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// literal checks that b holds word at i and returns the index after it, or
// -1.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

package secrets

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// MaskJSON masks secrets inside the string values (not the member names)
// of a JSON document and returns valid JSON text, with the number of
// matches. Each string is read with its escapes decoded, so a private key
// written with \n escapes, or a token with \u escapes, is found; a string
// that changed is written again (with no escapes but those it needs), and
// everything else is left byte for byte as it was: member order, spacing,
// numbers, and the escapes of the strings that did not change. When
// nothing matches it returns doc itself and 0, without allocating when
// doc holds none of the patterns' literals.
//
// The name of a member also counts: the value of "aws_secret_access_key"
// (or secretAccessKey, ...) is masked as aws_secret_key when it is a key
// of 40 characters, the credentials of "Authorization" ("Basic ...",
// "Bearer ...") are masked as basic_auth or bearer, and the value of a
// member whose name ends as a secret's (db_password, clientSecret,
// GITHUB_TOKEN) is masked whole, as credential unless a kind of its own
// covers it.
//
// Input that is not valid JSON is masked as plain text; if that makes it
// valid JSON, it is then masked as JSON too, so masking what MaskJSON
// returned changes nothing.
func (m *Masker) MaskJSON(doc []byte) ([]byte, int) {
	if !mayMatchJSON(m, doc) {
		return doc, 0
	}
	if !json.Valid(doc) {
		return m.maskText(doc)
	}
	return m.maskJSON(doc)
}

// mayMatchJSON is mayMatch for JSON text, whose strings' escapes may hide
// a literal: \/ and \u escapes are read first, the others never stand for
// a byte of a literal.
func mayMatchJSON(m *Masker, doc []byte) bool {
	if mayMatch(m, doc) {
		return true
	}
	if !hasLiteralEscape(doc) {
		return false
	}
	bp := viewPool.Get().(*[]byte)
	v := unescapeLiterals((*bp)[:0], doc)
	ok := mayMatch(m, v)
	if cap(v) <= 1<<16 {
		*bp = v[:0]
		viewPool.Put(bp)
	}
	return ok
}

var viewPool = sync.Pool{New: func() any { return new([]byte) }}

// hasLiteralEscape reports whether doc has a \/ or a \u escape.
func hasLiteralEscape(doc []byte) bool {
	for {
		i := bytes.IndexByte(doc, '\\')
		if i < 0 || i+1 >= len(doc) {
			return false
		}
		if c := doc[i+1]; c == 'u' || c == '/' {
			return true
		}
		doc = doc[i+2:]
	}
}

// unescapeLiterals appends doc to dst with \/ as "/" and each \u escape of
// a printable ASCII character as that character: all a literal may hold.
func unescapeLiterals(dst, doc []byte) []byte {
	for i := 0; i < len(doc); {
		j := indexByteFrom(doc, i, '\\')
		if j < 0 || j+1 >= len(doc) {
			return append(dst, doc[i:]...)
		}
		dst = append(dst, doc[i:j]...)
		switch {
		case doc[j+1] == '/':
			dst = append(dst, '/')
			i = j + 2
		case doc[j+1] == 'u' && j+6 <= len(doc):
			if r, ok := hex4(doc[j+2 : j+6]); ok && 0x20 <= r && r < 0x7f {
				dst = append(dst, byte(r))
				i = j + 6
				break
			}
			fallthrough
		default:
			dst = append(dst, doc[j], doc[j+1])
			i = j + 2
		}
	}
	return dst
}

// maskText masks text that is not JSON.
func (m *Masker) maskText(doc []byte) ([]byte, int) {
	s, n := m.mask(string(doc))
	if n == 0 {
		return doc, 0
	}
	out := []byte(s)
	if json.Valid(out) {
		more, k := m.maskJSON(out)
		return more, n + k
	}
	return out, n
}

// maskJSON masks the string values of valid JSON text.
func (m *Masker) maskJSON(doc []byte) ([]byte, int) {
	var out, scratch []byte
	last, total := 0, 0
	put := func(from, to int, masked string) {
		if out == nil {
			out = make([]byte, 0, len(doc)+len(doc)/8)
		}
		out = append(out, doc[last:from]...)
		out = appendString(out, masked)
		last = to
	}
	for i := 0; ; {
		if i = indexByteFrom(doc, i, '"'); i < 0 {
			break
		}
		end, esc := stringEnd(doc, i)
		name := none
		if k := skipSpace(doc, end); k < len(doc) && doc[k] == ':' {
			// A member name, then its value.
			raw := doc[i+1 : end-1]
			if esc {
				scratch = unquote(scratch[:0], raw)
				raw = scratch
			}
			name = nameOf(raw)
			if i = skipSpace(doc, k+1); i >= len(doc) || doc[i] != '"' {
				continue
			}
			end, esc = stringEnd(doc, i)
		}
		raw := doc[i+1 : end-1]
		if esc {
			scratch = unquote(scratch[:0], raw)
			raw = scratch
		}
		if s, n := m.maskValue(raw, name); n > 0 {
			put(i, end, s)
			total += n
		}
		i = end
	}
	if total == 0 {
		return doc, 0
	}
	return append(out, doc[last:]...), total
}

// maskValue masks a string value, decoded, that belongs to a member with
// the name.
func (m *Masker) maskValue(v []byte, name memberName) (string, int) {
	if m != nil && m.valuesOnly {
		name = none // the names' rules are built in
	}
	switch name {
	case awsSecretName:
		if len(v) == 40 && all(v, isAWSSecretByte) {
			return maskFor(KindAWSSecretKey), 1
		}
	case authorizationName:
		if s, ok := maskCredentials(v); ok {
			return s, 1
		}
	case settingName:
		if len(v) > 0 && !bytes.Contains(v, []byte("[REDACTED")) {
			// Named by its own kind when one covers the whole value.
			if s, n := m.mask(string(v)); n == 1 && strings.HasPrefix(s, "[REDACTED:") && strings.IndexByte(s, ']') == len(s)-1 {
				return s, 1
			}
			return maskFor(KindCredential), 1
		}
	}
	if !mayMatch(m, v) {
		return "", 0
	}
	return m.mask(string(v))
}

// maskCredentials masks the credentials of an Authorization value,
// "Basic <credentials>" or "Bearer <token>" (8 characters or more).
func maskCredentials(v []byte) (string, bool) {
	i := skipSpace(v, 0)
	var kind string
	var ok func(byte) bool
	switch {
	case atFold(v, i, "basic"):
		i, kind, ok = i+len("basic"), KindBasicAuth, isBase64Byte
	case atFold(v, i, "bearer"):
		i, kind, ok = i+len("bearer"), KindBearer, isToken68Byte
	default:
		return "", false
	}
	from := skipSpace(v, i)
	to := from
	for to < len(v) && ok(v[to]) {
		to++
	}
	if from == i || to-from < 8 || skipSpace(v, to) != len(v) {
		return "", false
	}
	return string(v[:from]) + maskFor(kind) + string(v[to:]), true
}

func isBase64Byte(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

func isAWSSecretByte(c byte) bool { return c != '=' && isBase64Byte(c) }

// isToken68Byte: the characters of a bearer token (RFC 6750).
func isToken68Byte(c byte) bool {
	return isBase64Byte(c) || c == '-' || c == '.' || c == '_' || c == '~'
}

func all(v []byte, ok func(byte) bool) bool {
	for _, c := range v {
		if !ok(c) {
			return false
		}
	}
	return true
}

// memberName is what the name of a member says of its value.
type memberName int

const (
	none memberName = iota
	awsSecretName
	authorizationName
	// settingName: a secret's name (secretName), such as db_password or
	// clientSecret; its value is masked whole, as a credential.
	settingName
)

// nameOf classifies a member name, ignoring case, "_" and "-":
// ...secret_access_key and aws_secret_key name an AWS secret key,
// authorization and proxy-authorization credentials, and a name ending as
// a secret's does (secretName) a secret.
func nameOf(name []byte) memberName {
	other := none
	if secretName(name, 0, len(name)) {
		other = settingName
	}
	var buf [32]byte
	n := 0
	for _, c := range name {
		if c == '_' || c == '-' {
			continue
		}
		if n == len(buf) {
			return other
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	b := buf[:n]
	switch {
	case n >= 15 && string(b[n-15:]) == "secretaccesskey", string(b) == "awssecretkey":
		return awsSecretName
	case string(b) == "authorization", string(b) == "proxyauthorization":
		return authorizationName
	}
	return other
}

// stringEnd returns the offset after the string that starts at doc[i], a
// '"', and whether the string has escapes.
func stringEnd(doc []byte, i int) (int, bool) {
	esc := false
	for k := i + 1; ; {
		q := indexByteFrom(doc, k, '"')
		if q < 0 {
			return len(doc), esc
		}
		if !esc && bytes.IndexByte(doc[k:q], '\\') >= 0 {
			esc = true
		}
		n := 0
		for p := q - 1; p > i && doc[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, esc
		}
		k = q + 1
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// unquote appends the content of a valid JSON string, between its quotes,
// to dst with its escapes decoded, as encoding/json does (a lone surrogate
// becomes U+FFFD). Other bytes are copied as they are.
func unquote(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		j := indexByteFrom(raw, i, '\\')
		if j < 0 || j+1 >= len(raw) {
			return append(dst, raw[i:]...)
		}
		dst = append(dst, raw[i:j]...)
		i = j + 2
		switch c := raw[j+1]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := rune(utf8.RuneError), false
			if j+6 <= len(raw) {
				r, ok = hex4(raw[j+2 : j+6])
			}
			if !ok {
				dst = append(dst, raw[j:j+2]...)
				break
			}
			i = j + 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if at(raw, i, `\u`) && i+6 <= len(raw) {
					r2, ok = hex4(raw[i+2 : i+6])
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
	return dst
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendString appends s as a JSON string: '"', '\\' and control
// characters escaped, and U+2028 and U+2029 as encoding/json writes them;
// other bytes as they are.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			if c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xa8 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\u202`...)
				dst = append(dst, hex[s[i+2]&0xf])
				i += 3
				start = i
				continue
			}
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		default:
			dst = append(dst, `\u00`...)
			dst = append(dst, hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

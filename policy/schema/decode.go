package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxDepth bounds the nesting Decode accepts.
const maxDepth = 1000

// Decode reads one JSON value into the form the validator (and CEL) use:
// map[string]any, []any, string, json.Number, bool and nil. It is a
// direct scan of the bytes, several times faster than encoding/json for
// small objects. The last of duplicate keys wins, as in encoding/json
// (guard refuses duplicate keys before it decodes).
func Decode(b []byte) (any, error) {
	d := decoder{b: b}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, fmt.Errorf("invalid character %q after the value at offset %d", d.b[d.i], d.i)
	}
	return v, nil
}

type decoder struct {
	b []byte
	i int
}

var errEnd = errors.New("unexpected end of JSON")

// RangeError is a number that overflows a double (1e400): peers read it
// as infinity, as an error, or as a big number, so guard refuses it.
type RangeError struct {
	Path   string // JSON Pointer to the number, "" for the root
	Number string
}

func (e *RangeError) Error() string {
	p := e.Path
	if p == "" {
		p = "/"
	}
	return p + ": " + e.Message()
}

// Message says what is wrong, without the path.
func (e *RangeError) Message() string {
	n := e.Number
	if len(n) > 40 {
		n = n[:37] + "..."
	}
	return fmt.Sprintf("number %s is out of range: it overflows a double (at most ±1.8e308)", n)
}

// under adds one step (a member name or an index) in front of a
// RangeError's path.
func under(err error, step string) error {
	var re *RangeError
	if errors.As(err, &re) {
		re.Path = "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(step) + re.Path
	}
	return err
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) errAt(what string) error {
	if d.i >= len(d.b) {
		return errEnd
	}
	return fmt.Errorf("%s at offset %d", what, d.i)
}

func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, d.errAt("nesting too deep")
	}
	if d.i >= len(d.b) {
		return nil, errEnd
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.lit("true")
	case c == 'f':
		return false, d.lit("false")
	case c == 'n':
		return nil, d.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, d.errAt("invalid character")
}

func (d *decoder) lit(s string) error {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return d.errAt("invalid literal")
	}
	d.i += len(s)
	return nil
}

func (d *decoder) object(depth int) (any, error) {
	d.i++ // {
	m := make(map[string]any, 8)
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errAt("expected a member name")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errAt("expected ':'")
		}
		d.i++
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, under(err, k)
		}
		m[k] = v
		d.space()
		if d.i >= len(d.b) {
			return nil, errEnd
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return m, nil
		default:
			return nil, d.errAt("expected ',' or '}'")
		}
	}
}

func (d *decoder) array(depth int) (any, error) {
	d.i++ // [
	a := make([]any, 0, 4)
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, under(err, strconv.Itoa(len(a)))
		}
		a = append(a, v)
		d.space()
		if d.i >= len(d.b) {
			return nil, errEnd
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return a, nil
		default:
			return nil, d.errAt("expected ',' or ']'")
		}
	}
}

// str reads a string. Without escapes (the common case) it is a copy of
// the bytes; with escapes, encoding/json reads the one token.
func (d *decoder) str() (string, error) {
	start := d.i
	d.i++
	escaped := false
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			raw := d.b[start:d.i]
			if !escaped {
				s := string(raw[1 : len(raw)-1])
				if !utf8.ValidString(s) {
					return "", fmt.Errorf("invalid UTF-8 in a string at offset %d", start)
				}
				return s, nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", fmt.Errorf("string at offset %d: %w", start, err)
			}
			return s, nil
		case c == '\\':
			escaped = true
			d.i += 2
			continue
		case c < 0x20:
			return "", d.errAt("control character in a string")
		}
		d.i++
	}
	return "", errEnd
}

func (d *decoder) number() (any, error) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, d.errAt("invalid number")
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, d.errAt("invalid number")
		}
	}
	exp := false
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		exp = true
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errAt("invalid number")
		}
	}
	n := d.b[start:d.i]
	// Only an exponent or more than 308 digits can overflow a double.
	if exp || len(n) > 308 {
		if f, _ := strconv.ParseFloat(string(n), 64); math.IsInf(f, 0) {
			return nil, &RangeError{Number: string(n)}
		}
	}
	return json.Number(n), nil
}

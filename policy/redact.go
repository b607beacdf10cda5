package policy

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Redacted replaces a masked value in the audit log.
const Redacted = "[REDACTED]"

// Redactor masks the values of secret-named members in JSON text before it
// is recorded.
type Redactor struct {
	keys   map[string]bool // normalised names
	probes [][]byte        // lower-case names, for a quick check
}

// Redactor returns the configuration's redactor.
func (c *Config) Redactor() *Redactor {
	r := &Redactor{keys: map[string]bool{}}
	for _, k := range c.Redact.Keys {
		n := normKey(k)
		if n == "" || r.keys[n] {
			continue
		}
		r.keys[n] = true
		r.probes = append(r.probes, []byte(n))
	}
	return r
}

// normKey folds the ways a name is written: case, "-" and "_" do not count,
// so "api_key" also masks "apiKey" and "API-KEY".
func normKey(k string) string {
	k = strings.ToLower(k)
	return strings.NewReplacer("_", "", "-", "").Replace(k)
}

// Redact returns the JSON text with the value of every member whose name
// matches a configured key replaced by "[REDACTED]", at any depth. Text
// with no such member is returned as it is; text that is not JSON is
// returned as it is too (it is recorded as received).
func (r *Redactor) Redact(raw []byte) string {
	if r == nil || len(r.keys) == 0 || !r.mayContain(raw) {
		return string(raw)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return string(raw)
	}
	if !r.mask(v) {
		return string(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// mayContain is a cheap first look: could any key occur at all?
func (r *Redactor) mayContain(raw []byte) bool {
	lower := bytes.ToLower(raw)
	lower = bytes.ReplaceAll(bytes.ReplaceAll(lower, []byte("_"), nil), []byte("-"), nil)
	for _, p := range r.probes {
		if bytes.Contains(lower, p) {
			return true
		}
	}
	return false
}

func (r *Redactor) mask(v any) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if r.keys[normKey(k)] {
				x[k] = Redacted
				changed = true
				continue
			}
			if r.mask(e) {
				changed = true
			}
		}
	case []any:
		for _, e := range x {
			if r.mask(e) {
				changed = true
			}
		}
	}
	return changed
}

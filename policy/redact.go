package policy

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/guard-mcp/guard/policy/secrets"
)

// Redacted replaces a masked value in the audit log.
const Redacted = "[REDACTED]"

// Redactor masks the values of secret-named members in JSON text before it
// is recorded.
type Redactor struct {
	keys   map[string]bool // normalised names
	probes [][]byte        // lower-case names, sorted, for a quick check
	// starts[c] is 1 + the index of the first probe that begins with c (0:
	// none does).
	starts  [256]int32
	secrets *secrets.Masker // secret shapes, wherever they are
	own     *secrets.Masker // guard's own secrets alone; nil: none
}

// OwnSecretKind is the kind in the mask of one of guard's own secrets:
// "[REDACTED:guard-secret]".
const OwnSecretKind = "guard-secret"

// WithOwnSecrets returns a copy of r that also masks guard's own secrets,
// by value, wherever they appear: the UI's login token, the checkpoint
// key, the values of the variables the configuration expanded. Values
// shorter than secrets.MinValue (8 bytes) are not masked: they would mask
// ordinary text.
func (r *Redactor) WithOwnSecrets(values []string) *Redactor {
	out := *r
	own := secrets.Values(OwnSecretKind, values)
	if own.Len() == 0 {
		return &out
	}
	out.own = own
	out.secrets = r.secrets.WithValues(OwnSecretKind, values)
	return &out
}

// MaskOwnSecrets masks guard's own secrets (WithOwnSecrets) in a message
// that goes to the client, whatever redact_results says: they are guard's,
// not the user's, and no tool has a reason to return them.
func (r *Redactor) MaskOwnSecrets(raw []byte) ([]byte, int) {
	if r == nil || r.own == nil {
		return raw, 0
	}
	return r.own.MaskJSON(raw)
}

// Redactor returns the configuration's redactor: values of the configured
// keys, and the built-in and configured secret patterns anywhere.
func (c *Config) Redactor() *Redactor {
	m, err := secrets.New(c.Redact.Patterns)
	if err != nil {
		// Parse refuses such patterns; a configuration built otherwise
		// keeps every pattern that compiles rather than none.
		var good []string
		for _, pat := range c.Redact.Patterns {
			if _, err := secrets.New([]string{pat}); err == nil {
				good = append(good, pat)
			}
		}
		m, _ = secrets.New(good)
	}
	r := &Redactor{keys: map[string]bool{}, secrets: m}
	for _, k := range c.Redact.Keys {
		n := normKey(k)
		if n == "" || r.keys[n] {
			continue
		}
		r.keys[n] = true
		r.probes = append(r.probes, []byte(n))
	}
	slices.SortFunc(r.probes, bytes.Compare)
	for i := len(r.probes) - 1; i >= 0; i-- {
		r.starts[r.probes[i][0]] = int32(i + 1)
	}
	return r
}

// normKey folds the ways a name is written: case, "-" and "_" do not count,
// so "api_key" also masks "apiKey" and "API-KEY".
func normKey(k string) string {
	k = strings.ToLower(k)
	return strings.NewReplacer("_", "", "-", "").Replace(k)
}

// MaskSecrets masks the secret patterns in a message that goes to the
// client (redact_results: true), keeping every other byte.
func (r *Redactor) MaskSecrets(raw []byte) ([]byte, int) {
	if r == nil || r.secrets == nil {
		return raw, 0
	}
	return r.secrets.MaskJSON(raw)
}

// Redact returns the JSON text with the value of every member whose name
// matches a configured key replaced by "[REDACTED]", at any depth. Text
// with no such member is returned as it is; text that is not JSON is
// returned as it is too (it is recorded as received).
func (r *Redactor) Redact(raw []byte) string {
	if r == nil {
		return string(raw)
	}
	if r.secrets != nil {
		raw, _ = r.secrets.MaskJSON(raw)
	}
	if len(r.keys) == 0 || len(raw) == 0 || !r.mayContain(raw) {
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

// mayContain is a cheap first look, without copying the text: could any
// key occur at all (ignoring case, "_" and "-")? One pass tries the keys
// only where one of them could begin.
func (r *Redactor) mayContain(raw []byte) bool {
	for i, c := range raw {
		c = lower(c)
		for k := int(r.starts[c]) - 1; k >= 0 && k < len(r.probes) && r.probes[k][0] == c; k++ {
			if foldedPrefix(raw[i:], r.probes[k]) {
				return true
			}
		}
	}
	return false
}

// foldedPrefix reports whether raw begins with probe (lower case, without
// "_" or "-") when raw's letters are lowered and its "_" and "-" skipped.
func foldedPrefix(raw, probe []byte) bool {
	j, k := 0, 0
	for j < len(raw) && k < len(probe) {
		c := raw[j]
		j++
		if c == '_' || c == '-' {
			continue
		}
		if lower(c) != probe[k] {
			break
		}
		k++
	}
	return k == len(probe)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
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

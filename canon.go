package guard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// Canonical returns the RFC 8785 (JSON Canonicalization Scheme) form of a
// JSON text. It fails on invalid JSON and on duplicate object keys.
func Canonical(raw []byte) ([]byte, error) {
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	return out, nil
}

// Digest returns "sha256:" and the hex SHA-256 of the canonical form of a
// JSON text. Absent arguments (an empty text) digest as an empty object.
func Digest(raw []byte) (string, error) {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	c, err := Canonical(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// pinnedMembers are the members of a tool definition that its pin covers.
var pinnedMembers = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// PinnedMembers returns the members of a tool definition that its pin
// covers.
func PinnedMembers() []string { return append([]string(nil), pinnedMembers...) }

// PinOf computes a tool's pin: the Digest of an object holding the tool
// definition's name, title, description, inputSchema, outputSchema and
// annotations exactly as received. A member that is absent stays absent, so
// that a server adding `"title": null` changes the pin.
func PinOf(def json.RawMessage) (string, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(def, &members); err != nil {
		return "", fmt.Errorf("tool definition: %w", err)
	}
	pinned := make(map[string]json.RawMessage, len(pinnedMembers))
	for _, k := range pinnedMembers {
		if v, ok := members[k]; ok {
			pinned[k] = v
		}
	}
	b, err := json.Marshal(pinned)
	if err != nil {
		return "", fmt.Errorf("tool definition: %w", err)
	}
	return Digest(b)
}

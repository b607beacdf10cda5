// Package scan flags tool definitions whose descriptions carry instructions
// aimed at the model ("tool poisoning"): hidden tags, instruction overrides,
// invisible characters, whitespace that pushes text out of view, requests to
// read or send secrets, and references that hijack other servers' tools.
//
// The rules are a few phrase lists matched on a normalised text (lower case,
// whitespace collapsed, invisible characters dropped); they are written to
// leave ordinary descriptions alone, not to be complete.
package scan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// A Flag is one finding in one text of a tool definition.
type Flag struct {
	Kind     string // one of the Kind* constants
	Where    string // "description", "title", "inputSchema/properties/path/description", ...
	Evidence string // an excerpt of at most MaxEvidence bytes, invisible characters as \u{XXXX}
}

// The kinds of flag.
const (
	KindHiddenTag    = "hidden_tag"           // <IMPORTANT>, <SYSTEM>, [INST], <!-- -->, chat-template tokens
	KindOverride     = "instruction_override" // "ignore previous instructions", "do not tell the user", ...
	KindInvisible    = "invisible_unicode"    // zero-width, bidi, tag, format, private-use, control characters
	KindWhitespace   = "whitespace_run"       // whitespace long enough to push the text after it out of view
	KindSecretAccess = "secret_access"        // an instruction to read or send secrets or secret files
	KindCrossTool    = "cross_tool"           // text that tells the model how to use other tools
)

// MaxEvidence is the most bytes a Flag's Evidence holds.
const MaxEvidence = 120

// Options tune a scan.
type Options struct {
	// OtherTools are names of tools of OTHER servers (and their "server__tool"
	// forms); a text mentioning one is flagged KindCrossTool. A name of
	// letters only ("search") counts only where it is written as a tool name:
	// quoted, in backticks, followed by "(" or by " tool". Names shorter than
	// three characters are ignored.
	OtherTools []string
}

// Definition scans a tool definition, the tool object as JSON text as a
// server listed it. It scans the title, the description, and every string in
// annotations, inputSchema and outputSchema (descriptions, titles, enum,
// default and examples values, at any depth) except the values of required,
// pattern, $ref, $id, $schema and the other reference keywords. Flags come sorted by
// Where, then Kind, at most one per Where and Kind. A name in
// opts.OtherTools equal to the tool's own name is ignored. Text that is not a
// JSON object is an error.
func Definition(def []byte, opts Options) ([]Flag, error) {
	dec := json.NewDecoder(bytes.NewReader(def))
	dec.UseNumber()
	var tool map[string]any
	if err := dec.Decode(&tool); err != nil {
		return nil, fmt.Errorf("scan: tool definition: %w", err)
	}
	if tool == nil {
		return nil, errors.New("scan: tool definition is not an object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("scan: tool definition: data after the object")
	}
	self, _ := tool["name"].(string)
	sc := scanner{others: otherTools(opts.OtherTools, self)}
	var flags []Flag
	for _, k := range []string{"title", "description"} {
		if s, ok := tool[k].(string); ok {
			flags = append(flags, sc.text(k, s)...)
		}
	}
	for _, k := range []string{"annotations", "inputSchema", "outputSchema"} {
		if v, ok := tool[k]; ok {
			flags = sc.walk(flags, k, "", v)
		}
	}
	slices.SortFunc(flags, func(a, b Flag) int {
		if c := strings.Compare(a.Where, b.Where); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return flags, nil
}

// Text scans one piece of text and returns its flags sorted by Kind, at most
// one of each, all with the given where.
func Text(where, s string, opts Options) []Flag {
	sc := scanner{others: otherTools(opts.OtherTools, "")}
	return sc.text(where, s)
}

// structural are schema keywords whose string values are property names,
// references or regular expressions, not text meant for the model: a
// pattern may well exclude invisible characters, a required name may be
// another server's tool's.
var structural = map[string]bool{
	"required": true, "pattern": true,
	"$ref": true, "$schema": true, "$id": true, "$anchor": true,
	"$dynamicRef": true, "$dynamicAnchor": true,
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// walk scans the strings in v, found under the member named key.
func (sc *scanner) walk(flags []Flag, where, key string, v any) []Flag {
	switch v := v.(type) {
	case string:
		if !structural[key] {
			flags = append(flags, sc.text(where, v)...)
		}
	case map[string]any:
		for k, e := range v {
			flags = sc.walk(flags, where+"/"+pointerSegment(k), k, e)
		}
	case []any:
		for i, e := range v {
			flags = sc.walk(flags, where+"/"+strconv.Itoa(i), key, e)
		}
	}
	return flags
}

// pointerSegment writes a member name as a JSON Pointer segment (RFC 6901),
// with invisible characters escaped and at most 64 bytes.
func pointerSegment(k string) string {
	k = pointerEscaper.Replace(k)
	return excerpt("", k, 64)
}

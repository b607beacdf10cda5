// Package schema validates tool arguments and results against the JSON Schemas a tool declares.
//
// A tool's inputSchema checks the arguments of a call and its outputSchema
// checks the structuredContent of a result. Schemas are compiled once per
// key (the tool's pin) by a [Cache] and validated many times. Every dialect
// from draft-04 to 2020-12 is understood, chosen by the schema's "$schema"
// and 2020-12 when it is absent. A schema is only ever read from its own
// text: a reference to anything outside it (a file, a web address, any URL)
// makes the schema fail to compile, and nothing is fetched.
//
// Messages in a [Violation] say what is wrong and where, but never repeat the
// value found, so they can be logged and shown without leaking arguments.
package schema

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// resourceURL names the schema being compiled. Each compile has its own
// compiler, so one name serves every schema.
const resourceURL = "mem:///schema.json"

// Option configures a Cache.
type Option func(*Cache)

// AssertFormats makes "format" an assertion (for example, a string with
// format "email" must be an email address). Without it formats are
// annotations only, as JSON Schema 2019-09 and later specify.
func AssertFormats() Option {
	return func(c *Cache) { c.assertFormats = true }
}

// Cache compiles schemas once per key (a tool's pin, a string like
// "sha256:...") and keeps them, up to a bound: a server that keeps
// changing its definitions does not grow it without end. Safe for
// concurrent use.
type Cache struct {
	assertFormats bool
	printer       *message.Printer
	max           int // entries kept; past it, one is dropped for each new one

	mu      sync.Mutex
	entries map[string]*entry
}

// cacheEntries is how many compiled schemas a Cache keeps.
const cacheEntries = 4096

type entry struct {
	once   sync.Once
	schema *Schema
	err    error
}

// NewCache returns an empty Cache.
func NewCache(opts ...Option) *Cache {
	c := &Cache{
		printer: message.NewPrinter(language.English),
		entries: map[string]*entry{},
		max:     cacheEntries,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Compile returns the compiled schema for key, compiling raw (the schema's
// JSON text) on first use. The key identifies the schema: later calls with
// the same key get the first result, whatever raw they pass. A schema that
// does not compile gives an error saying why, and that error is kept too,
// so it is not compiled again on every call.
func (c *Cache) Compile(key string, raw []byte) (*Schema, error) {
	return c.once(key, func() (*Schema, error) { return c.compile(raw) })
}

// CompileFrom is Compile for a schema whose text find returns: find is
// called on the key's first use only, and when it returns nil (there is no
// schema) the result is nil with no error, kept as a compiled schema is.
func (c *Cache) CompileFrom(key string, find func() []byte) (*Schema, error) {
	return c.once(key, func() (*Schema, error) {
		raw := find()
		if raw == nil {
			return nil, nil
		}
		return c.compile(raw)
	})
}

// once returns key's entry, made by compile on the key's first use.
func (c *Cache) once(key string, compile func() (*Schema, error)) (*Schema, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok {
		if len(c.entries) >= c.max {
			for k := range c.entries { // an arbitrary one: map order is random
				delete(c.entries, k)
				break
			}
		}
		e = &entry{}
		c.entries[key] = e
	}
	c.mu.Unlock()
	e.once.Do(func() {
		e.schema, e.err = compile()
		if e.err != nil {
			e.err = fmt.Errorf("schema %s: %w", key, e.err)
		}
	})
	return e.schema, e.err
}

func (c *Cache) compile(raw []byte) (*Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return &Schema{printer: c.printer}, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.UseLoader(refuseLoader{})
	if c.assertFormats {
		comp.AssertFormat()
	} else {
		// The library asserts formats for drafts before 2019-09; make them
		// annotations there too. ("regex" cannot be overridden and stays
		// asserted in those drafts.)
		for _, name := range libraryFormats {
			comp.RegisterFormat(&jsonschema.Format{Name: name, Validate: func(any) error { return nil }})
		}
	}
	if err := comp.AddResource(resourceURL, doc); err != nil {
		return nil, fmt.Errorf("adding resource: %w", err)
	}
	s, err := comp.Compile(resourceURL)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	return &Schema{s: s, printer: c.printer}, nil
}

// libraryFormats are the formats the library knows how to assert.
var libraryFormats = [...]string{
	"json-pointer", "relative-json-pointer", "uuid", "duration", "period",
	"ipv4", "ipv6", "hostname", "email", "date", "time", "date-time",
	"uri", "iri", "uri-reference", "iri-reference", "uri-template", "semver",
}

// refuseLoader is the compiler's only loader: a schema may refer to itself,
// never to anything else.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("guard refuses to load external reference %q: a schema must be self-contained", url)
}

// Schema is a compiled schema; safe for concurrent use.
type Schema struct {
	s       *jsonschema.Schema // nil accepts every JSON value
	printer *message.Printer
}

// Violation is one way an instance fails its schema.
type Violation struct {
	Path    string // JSON Pointer into the instance, "" for the root, e.g. "/path" or "/items/0/name"
	Message string // what is wrong, for a model to correct itself, e.g. "expected string, got number"
}

// String gives the violation as "/path: message", the root shown as "/".
func (v Violation) String() string {
	p := v.Path
	if p == "" {
		p = "/"
	}
	return p + ": " + v.Message
}

// Summary joins violations as "/path: expected string, got number; /mode: ...",
// ordered by path then message.
func Summary(vs []Violation) string {
	vs = slices.Clone(vs)
	sortViolations(vs)
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}

// Validate checks instance (JSON text) and returns the violations, ordered
// by path then message; empty when valid. An instance that is not JSON is
// one violation at the root. Callers pass "{}" for absent arguments.
func (s *Schema) Validate(instance []byte) []Violation {
	v, err := Decode(instance)
	if err != nil {
		return []Violation{{Path: "", Message: "not JSON: " + err.Error()}}
	}
	return s.ValidateValue(v)
}

// ValidateValue checks an instance already decoded by Decode.
func (s *Schema) ValidateValue(v any) []Violation {
	if s.s == nil {
		return nil
	}
	err := s.s.Validate(v)
	if err == nil {
		return nil
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []Violation{{Path: "", Message: err.Error()}}
	}
	var vs []Violation
	s.flatten(verr, &vs)
	sortViolations(vs)
	return slices.Compact(vs)
}

// flatten appends the leaves of the error tree below e.
func (s *Schema) flatten(e *jsonschema.ValidationError, vs *[]Violation) {
	switch e.ErrorKind.(type) {
	case *kind.PropertyNames, *kind.ContentSchema, *kind.Contains, *kind.MinContains:
		// Their causes describe another value (a property name, decoded
		// content) or why each item is not the one sought; the parent
		// says it all.
	default:
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				s.flatten(c, vs)
			}
			return
		}
	}
	path := pointer(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, p := range k.Missing {
			*vs = append(*vs, Violation{path, "missing property " + strconv.Quote(p)})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			*vs = append(*vs, Violation{path, "additional property " + strconv.Quote(p) + " is not allowed"})
		}
	default:
		*vs = append(*vs, Violation{path, s.message(e.ErrorKind)})
	}
}

// message describes a leaf error without repeating the value found.
func (s *Schema) message(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return "expected " + strings.Join(k.Want, " or ") + ", got " + k.Got
	case *kind.Enum:
		if len(k.Want) == 1 {
			return "value must be " + display(k.Want[0])
		}
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		return "value must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		return "value must be " + display(k.Want)
	case *kind.Pattern:
		return "does not match pattern " + strconv.Quote(k.Want)
	case *kind.Format:
		return "not a valid " + k.Want
	case *kind.FalseSchema:
		return "no value is allowed here"
	case *kind.PropertyNames:
		return "property name " + strconv.Quote(k.Property) + " is not allowed"
	case *kind.OneOf:
		if len(k.Subschemas) == 2 {
			return fmt.Sprintf("matches more than one oneOf alternative (%d and %d)", k.Subschemas[0], k.Subschemas[1])
		}
		return "matches no oneOf alternative"
	case *kind.Minimum:
		return "must be >= " + number(k.Want)
	case *kind.Maximum:
		return "must be <= " + number(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + number(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + number(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + number(k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long, got %d", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long, got %d", k.Want, k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items, got %d", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items, got %d", k.Want, k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d properties, got %d", k.Want, k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d properties, got %d", k.Want, k.Got)
	case *kind.AdditionalItems:
		return fmt.Sprintf("the last %d items are not allowed", k.Count)
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal; items must be unique", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "no item matches the \"contains\" schema"
	case *kind.MinContains:
		return fmt.Sprintf("must have at least %d items matching the \"contains\" schema, got %d", k.Want, len(k.Got))
	case *kind.MaxContains:
		return fmt.Sprintf("must have at most %d items matching the \"contains\" schema, got %d", k.Want, len(k.Got))
	case *kind.Not:
		return "must not match the \"not\" schema"
	case *kind.Dependency:
		return "properties " + quoteAll(k.Missing) + " are required when " + strconv.Quote(k.Prop) + " is present"
	case *kind.DependentRequired:
		return "properties " + quoteAll(k.Missing) + " are required when " + strconv.Quote(k.Prop) + " is present"
	}
	return k.LocalizedString(s.printer)
}

// display renders a value written in the schema (not the instance).
func display(v any) string {
	if str, ok := v.(string); ok {
		return strconv.Quote(str)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// number renders a number written in the schema, exactly when it is whole.
func number(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// pointer turns instance location tokens into a JSON Pointer (RFC 6901).
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func sortViolations(vs []Violation) {
	slices.SortFunc(vs, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Message, b.Message))
	})
}

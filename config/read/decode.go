package read

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Presetter is a section, or part of one, with defaults that hold only
// where it is written (a claim's name where a provider is configured):
// Decode calls Preset before it reads it.
type Presetter interface {
	Preset()
}

// NodeReader is a field's type that reads itself from its node: a list
// whose entries are each checked at their own line.
type NodeReader interface {
	ReadNode(r *Reader, n *yaml.Node) error
}

// Validator is a section, or part of one, that checks itself once it is
// read: its problems are placed at the mapping it was read from.
type Validator interface {
	Validate() error
}

// Decode reads a mapping node into the struct dst points to, strictly, by
// its fields' yaml tags: a key that no field names is an error, as in
// Mapping, and so is a value of the wrong kind. Each field is read by its
// type:
//
//   - string: Str; Enum with the values of an enum tag (`enum:"a,b"`);
//     Secret with `expand:"secret"`;
//   - bool: Bool; int: Count; int64: Size;
//   - time.Duration: Duration; OptDuration with `off:"allowed"`;
//   - []string: List; NonEmptyList with `nonempty:"NAME"` (NAME names the
//     list in errors);
//   - a struct: Decode, in turn;
//   - a type that is a NodeReader (through its pointer): its ReadNode.
//
// A null node reads nothing. A struct that is a Presetter is preset before
// it is read, and one read from a mapping that is a Validator is then
// validated, its problem placed at the mapping's line.
func (r *Reader) Decode(n *yaml.Node, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("read.Decode: %T is not a pointer to a struct", dst))
	}
	return r.decodeStruct(n, v.Elem())
}

// DecodeEntry reads an entry of a list like Decode, and validates it
// even when it is null: a section may be left empty, an entry stands for
// something (a receiver) and must say what.
func (r *Reader) DecodeEntry(n *yaml.Node, dst any) error {
	if err := r.Decode(n, dst); err != nil {
		return err
	}
	if val, ok := dst.(Validator); ok && n.Kind != yaml.MappingNode {
		if err := val.Validate(); err != nil {
			return r.Errf(n, "%v", err)
		}
	}
	return nil
}

func (r *Reader) decodeStruct(n *yaml.Node, v reflect.Value) error {
	if p, ok := v.Addr().Interface().(Presetter); ok {
		p.Preset()
	}
	t := v.Type()
	fields := map[string]func(*yaml.Node) error{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		fields[name] = r.field(f, v.Field(i))
	}
	if err := r.Mapping(n, fields); err != nil {
		return err
	}
	if val, ok := v.Addr().Interface().(Validator); ok && n.Kind == yaml.MappingNode {
		if err := val.Validate(); err != nil {
			return r.Errf(n, "%v", err)
		}
	}
	return nil
}

var durationType = reflect.TypeFor[time.Duration]()

// field is the reader of one field of a struct, by its type and tags.
func (r *Reader) field(f reflect.StructField, v reflect.Value) func(*yaml.Node) error {
	p := v.Addr().Interface()
	if nr, ok := p.(NodeReader); ok {
		return func(n *yaml.Node) error { return nr.ReadNode(r, n) }
	}
	switch {
	case f.Type == durationType:
		if f.Tag.Get("off") == "allowed" {
			return r.OptDuration(p.(*time.Duration))
		}
		return r.Duration(p.(*time.Duration))
	case f.Type.Kind() == reflect.String:
		switch {
		case f.Tag.Get("enum") != "":
			return r.Enum(p.(*string), strings.Split(f.Tag.Get("enum"), ",")...)
		case f.Tag.Get("expand") == "secret":
			return r.Secret(p.(*string))
		}
		return r.Str(p.(*string))
	case f.Type.Kind() == reflect.Bool:
		return r.Bool(p.(*bool))
	case f.Type.Kind() == reflect.Int:
		return r.Count(p.(*int))
	case f.Type.Kind() == reflect.Int64:
		return r.Size(p.(*int64))
	case f.Type == reflect.TypeFor[[]string]():
		if what := f.Tag.Get("nonempty"); what != "" {
			return r.NonEmptyList(p.(*[]string), what)
		}
		return r.List(p.(*[]string))
	case f.Type.Kind() == reflect.Struct:
		return func(n *yaml.Node) error { return r.decodeStruct(n, v) }
	}
	panic(fmt.Sprintf("read.Decode: field %s of type %s has no reader", f.Name, f.Type))
}

// Value is the value a mapping gives key, as written (before its
// variables are expanded); "" when it gives none.
func Value(n *yaml.Node, key string) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// Has reports whether a mapping has key.
func Has(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

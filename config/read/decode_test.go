package read

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type inner struct {
	Name   string `yaml:"name"`
	preset bool
}

func (i *inner) Preset() { i.preset = true }

func (i inner) Validate() error {
	if i.Name == "bad" {
		return errors.New("inner: a bad name")
	}
	return nil
}

type section struct {
	Mode   string        `yaml:"mode" enum:"on,off"`
	Token  string        `yaml:"token" expand:"secret"`
	Every  time.Duration `yaml:"every" off:"allowed"`
	Count  int           `yaml:"count"`
	Size   int64         `yaml:"size"`
	Names  []string      `yaml:"names" nonempty:"section.names"`
	Inner  inner         `yaml:"inner"`
	Hidden string        `yaml:"-"`
}

func decode(t *testing.T, text string) (section, error) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	r := &Reader{File: "f.yaml", Getenv: func(k string) string { return "v-" + k }, Expanded: map[string]string{}}
	var s section
	return s, r.Decode(doc.Content[0], &s)
}

// Decode reads each field by its type and tags, and refuses what Mapping
// and the field's reader refuse, at the line.
func TestDecode(t *testing.T) {
	s, err := decode(t, "mode: on\ntoken: ${T}\nevery: off\ncount: 3\nsize: 1KiB\nnames: [a]\ninner: {name: x}\n")
	if err != nil || s.Mode != "on" || s.Token != "v-T" || s.Every != 0 || s.Count != 3 || s.Size != 1024 ||
		len(s.Names) != 1 || s.Inner.Name != "x" || !s.Inner.preset {
		t.Fatalf("%+v %v", s, err)
	}
	for text, want := range map[string]string{
		"mode: maybe\n":                   `f.yaml:1: "maybe" is not one of on, off`,
		"hidden: x\n":                     `f.yaml:1: unknown key "hidden" (known: count, every, inner, mode, names, size, token)`,
		"count: 0\n":                      `f.yaml:1: "0" is not a positive whole number`,
		"names: []\n":                     "f.yaml:1: section.names: list at least one, or leave it out",
		"mode: on\ninner:\n  name: bad\n": "f.yaml:3: inner: a bad name",
		"inner: [x]\n":                    "f.yaml:1: expected a mapping",
	} {
		if _, err := decode(t, text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", text, err, want)
		}
	}
}

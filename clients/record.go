package clients

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"unicode/utf8"
)

// record is what wrap did to a file, kept beside it (NAME.guard-wrap) so
// that unwrap can give it back: the file as it was before, whole, for as
// long as nothing else changes it, and each entry as it was and as guard
// left it.
type record struct {
	// Version is the record's format (recordVersion).
	Version int `json:"version"`
	// Time is when guard last wrapped the file (RFC 3339).
	Time string `json:"time"`
	// After is the digest of the file as wrap left it.
	After string `json:"after"`
	// Before is the file as it was before that wrap (or, when nothing
	// changed the file in between, the one before it).
	Before text `json:"before"`
	// Entries are the entries wrap changed, in the order it did.
	Entries []recordEntry `json:"entries"`
}

// recordEntry is one entry that guard wrapped: its text before and after.
type recordEntry struct {
	// Section and Name say where the entry is.
	Section []string `json:"section"`
	Name    string   `json:"name"`
	// Original and Wrapped are its exact text before and after wrap.
	Original text `json:"original"`
	Wrapped  text `json:"wrapped"`
}

// text is a file's or an entry's bytes in the record: a JSON string, or
// where they are not UTF-8 (which a JSON string cannot hold as they are),
// {"base64": ...}.
type text string

// MarshalJSON writes t as a string when it is UTF-8.
func (t text) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(t)) {
		return json.Marshal(string(t))
	}
	return json.Marshal(map[string][]byte{"base64": []byte(t)})
}

// UnmarshalJSON reads either form.
func (t *text) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = text(s)
		return nil
	}
	var o struct {
		Base64 []byte `json:"base64"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*t = text(o.Base64)
	return nil
}

const recordVersion = 1

// recordSuffix names the record beside a file.
const recordSuffix = ".guard-wrap"

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// readRecord reads the record beside path (nil when there is none).
func readRecord(path string) (*record, error) {
	b, err := os.ReadFile(path + recordSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading what guard did to %s: %w", path, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s%s: %w", path, recordSuffix, err)
	}
	if r.Version != recordVersion {
		return nil, fmt.Errorf("%s%s: version %d, which this guard does not read", path, recordSuffix, r.Version)
	}
	return &r, nil
}

// readWithRecord reads a client's file and the record beside it.
func readWithRecord(path string) ([]byte, *record, error) {
	data, _, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	rec, err := readRecord(path)
	return data, rec, err
}

func recordExists(path string) bool {
	_, err := os.Lstat(path + recordSuffix)
	return err == nil
}

// writeRecord keeps the record beside path, as readable as the file: it
// holds the file's entries, their secrets with them.
func writeRecord(path string, r *record, mode fs.FileMode) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(path+recordSuffix, append(b, '\n'), mode); err != nil {
		return fmt.Errorf("keeping what guard did: %w", err)
	}
	return nil
}

// readFile reads a client's file, and its permissions.
func readFile(path string) ([]byte, fs.FileMode, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	return b, st.Mode().Perm(), nil
}

// writeAtomic replaces the file at path (the file a link there points
// to) with data and the mode given: a temporary file in the same
// directory, synced, then renamed over it, so that a client reading it
// meanwhile, or a crash, sees the old file or the new one, whole.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".guard-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, there is none
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil && runtime.GOOS != "windows" {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// equalValues compares decoded entries: numbers by value whatever their
// type (TOML's integers, JSON's floats).
func equalValues(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			w, ok := bm[k]
			if !ok || !equalValues(v, w) {
				return false
			}
		}
		return true
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !equalValues(a[i], bl[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

package clients

import (
	"context"
	"fmt"
	"strings"
)

// Listed is one server of a file, as --list shows it.
type Listed struct {
	// Section is where the server is in its file (File.Sections), and
	// Name its key there.
	Section []string
	Name    string
	// Guard is the guard binary that runs it ("" when none does).
	Guard string
	// Status says what guard makes of it.
	Status string
}

// List reads f's servers: wrapped or not, and by which guard; remote
// ones are probed for OAuth as wrap would.
func (w *Wrapper) List(ctx context.Context, f *File) ([]Listed, error) {
	data, _, err := readFile(f.Path)
	if err != nil {
		return nil, err
	}
	_, servers, err := f.load(data)
	if err != nil {
		return nil, err
	}
	var out []Listed
	for i, section := range f.sections {
		for _, e := range servers[i] {
			l := Listed{Section: section, Name: e.name, Guard: e.guard}
			switch {
			case e.guard != "":
				l.Status = "wrapped by " + e.guard
			case e.fixed != "":
				l.Status = "not wrapped: " + e.fixed
			case e.kind == kindStdio:
				l.Status = "not wrapped: runs " + e.value["command"].(string)
			case e.kind == kindHTTP:
				transport := "Streamable HTTP"
				if e.remote.sse {
					transport = "SSE"
				}
				l.Status = fmt.Sprintf("not wrapped: %s at %s", transport, e.remote.url)
				if _, why, _ := w.plan(ctx, f.Client, e); why != "" {
					l.Status += " (" + why + ")"
				}
			default:
				l.Status = "not wrapped: neither a command nor a URL that guard can read"
			}
			if e.disabled {
				l.Status += "; disabled"
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// SectionName is how a section of a file is shown: nothing for the
// file's own servers, the project for one of Claude Code's.
func SectionName(section []string) string {
	if len(section) == 3 && section[0] == "projects" {
		return "project " + section[1]
	}
	if len(section) > 1 {
		return strings.Join(section, ".")
	}
	return ""
}

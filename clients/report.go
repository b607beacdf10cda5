package clients

import (
	"fmt"
	"io"
	"os"
)

// WriteReport writes what a change does (dry: would do) to its file: a
// line for the file, one for each server, and in a dry run the diff.
func (c *Change) WriteReport(w io.Writer, dry bool) {
	fmt.Fprintf(w, "%s: %s\n", c.File.Client.Title, c.File.Path)
	for _, o := range c.Servers {
		name := o.Name
		if s := SectionName(o.Section); s != "" && s != c.File.Client.servers {
			name += " (" + s + ")"
		}
		fmt.Fprintf(w, "  %s: %s\n", name, o)
	}
	if len(c.Servers) == 0 && c.Note == "" {
		fmt.Fprintln(w, "  no servers")
	}
	if c.Note != "" {
		fmt.Fprintf(w, "  %s\n", c.Note)
	}
	switch {
	case dry:
		io.WriteString(w, c.Diff())
	case !c.Changed():
	default:
		if _, err := os.Stat(c.File.Path + BackupSuffix); err != nil {
			break
		}
		if c.unwrap {
			fmt.Fprintf(w, "  the file as it was before guard first changed it is still %s\n", c.File.Path+BackupSuffix)
		} else {
			fmt.Fprintf(w, "  the original is kept as %s\n", c.File.Path+BackupSuffix)
		}
	}
}

// WriteList writes a file's servers as List read them.
func WriteList(w io.Writer, f *File, servers []Listed) {
	fmt.Fprintf(w, "%s (%s): %s\n", f.Client.Title, f.Client.Name, f.Path)
	for _, s := range servers {
		name := s.Name
		if sec := SectionName(s.Section); sec != "" && sec != f.Client.servers {
			name += " (" + sec + ")"
		}
		fmt.Fprintf(w, "  %s: %s\n", name, s.Status)
	}
	if len(servers) == 0 {
		fmt.Fprintln(w, "  no servers")
	}
	if f.Client.Note != "" {
		fmt.Fprintf(w, "  %s\n", f.Client.Note)
	}
}

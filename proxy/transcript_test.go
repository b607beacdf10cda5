package proxy

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/wire"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the guard>server and guard>client sections of testdata/transcripts")

// The sections of a transcript (testdata/transcripts/README.md).
const (
	secConfig      = "config"
	secClient      = "client>guard"
	secToServer    = "guard>server"
	secServer      = "server>guard"
	secToClient    = "guard>client"
	secDecide      = "decide"
	transcriptWait = 10 * time.Second
)

// TestTranscripts replays every file of testdata/transcripts against Run,
// guard's Session between a client and a server the file plays; the
// format, its sections and placeholders are in testdata/transcripts/README.md.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no transcripts")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txtar"), func(t *testing.T) { replay(t, f) })
	}
}

// transcriptClock is the time of every transcript: records, approvals and
// guard's texts are stamped with it.
var transcriptClock = time.Date(2026, 8, 1, 9, 30, 0, 0, time.UTC)

// replay plays one transcript: the client's and the server's sections are
// written to guard in file order; each expected section waits for as many
// lines as it holds from guard, and compares them with placeholders for
// guard's own values. What guard writes that no section expects is found
// once both peers are done (the client's input ends, then the server's
// output), never by waiting.
func replay(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ar := txtar.Parse(data)
	conf := "policy:\n  default: allow\n"
	if len(ar.Files) > 0 && ar.Files[0].Name == secConfig {
		conf = string(ar.Files[0].Data)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts, db, _ := testOptions(t, ctx, conf, time.Minute)
	cfg, err := config.Parse([]byte(conf), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return transcriptClock }
	holds := approvals.New(db.Holds(), approvals.Options{Timeout: 10 * time.Minute, Wait: time.Minute, ProgressEvery: time.Hour, Now: now})
	opts.Holds, opts.Now, opts.ProgressEvery = holds, now, time.Hour
	opts.InBand = cfg.Approval.InBand == "auto"
	opts.StateKey = []byte("transcripts")
	sess := NewSession(ctx, opts)

	c2gR, c2gW := io.Pipe()
	g2cR, g2cW := io.Pipe()
	s2gR, s2gW := io.Pipe()
	g2sR, g2sW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(ctx, NewStreamConn(c2gR, g2cW, opts.MaxMessage), NewStreamConn(s2gR, g2sW, opts.MaxMessage), sess)
		g2cW.Close()
	}()
	toServer, toClient := lines(g2sR), lines(g2cR)
	ph := &placeholders{session: sess.ID(), values: map[string]string{}}
	t.Cleanup(func() {
		c2gW.Close()
		s2gW.Close()
		<-done
	})

	var failed bool
	expect := func(f *txtar.File, from <-chan string) {
		t.Helper()
		want := sectionLines(f.Data)
		got := make([]string, 0, len(want))
		for range want {
			select {
			case l, ok := <-from:
				if !ok {
					t.Errorf("%s: guard ended its output after %d of %d lines", f.Name, len(got), len(want))
					failed = true
					return
				}
				got = append(got, ph.out(l))
			case <-time.After(transcriptWait):
				t.Fatalf("%s: no line %d from guard within %s (got %q)", f.Name, len(got)+1, transcriptWait, got)
			}
		}
		if g := strings.Join(got, "\n"); g != strings.Join(want, "\n") {
			if !*update {
				t.Errorf("%s:\n got: %s\nwant: %s", f.Name, g, strings.Join(want, "\n"))
			}
			f.Data = []byte(g + "\n")
			failed = true
		}
	}
	send := func(f *txtar.File, to io.Writer) {
		t.Helper()
		for _, l := range sectionLines(f.Data) {
			if _, err := io.WriteString(to, ph.in(l)+"\n"); err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
		}
	}
	for i := range ar.Files {
		f := &ar.Files[i]
		switch f.Name {
		case secConfig:
			if i != 0 {
				t.Fatalf("%s comes first", secConfig)
			}
		case secClient:
			send(f, c2gW)
		case secServer:
			send(f, s2gW)
		case secToServer:
			expect(f, toServer)
		case secToClient:
			expect(f, toClient)
		case secDecide:
			decide(t, holds, ph, f)
		default:
			t.Fatalf("unknown section %q", f.Name)
		}
	}
	// The client ends its input: guard closes the server's once it has
	// nothing more for it; then the server ends its output, and guard the
	// client's once it has answered what still waited.
	c2gW.Close()
	rest := func(name string, from <-chan string) {
		var extra []string
		for l := range from {
			extra = append(extra, ph.out(l))
		}
		if len(extra) == 0 {
			return
		}
		failed = true
		if !*update {
			t.Errorf("guard wrote more than the transcript expects, to %s:\n%s", name, strings.Join(extra, "\n"))
		}
		ar.Files = append(ar.Files, txtar.File{Name: name, Data: []byte(strings.Join(extra, "\n") + "\n")})
	}
	rest(secToServer, toServer)
	s2gW.Close()
	rest(secToClient, toClient)
	if *update && failed {
		if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// decide applies a decide section: lines "approve|deny APPROVAL BY [REASON]",
// the approval named by a placeholder guard's output gave it.
func decide(t *testing.T, holds *approvals.Manager, ph *placeholders, f *txtar.File) {
	t.Helper()
	for _, l := range sectionLines(f.Data) {
		w := strings.SplitN(l, " ", 4)
		if len(w) < 3 || (w[0] != "approve" && w[0] != "deny") {
			t.Fatalf("%s: %q is not approve|deny APPROVAL BY [REASON]", f.Name, l)
		}
		reason := ""
		if len(w) == 4 {
			reason = w[3]
		}
		if _, err := holds.Decide(context.Background(), ph.in(w[1]), w[0] == "approve", w[2], reason); err != nil {
			t.Fatalf("%s: %q: %v", f.Name, l, err)
		}
	}
}

// lines delivers what guard writes on r, a line at a time, until r ends:
// guard never waits on the test to read it.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

func sectionLines(data []byte) []string {
	var out []string
	for l := range strings.SplitSeq(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// placeholders stand for guard's own values in a transcript: $SESSION for
// the session's id (in guard's request ids, "guard-$SESSION-1"), $IDn for
// the n-th other UUID guard wrote (an approval's id), $STATEn for the n-th
// requestState. What the client and the server send has them replaced by
// the values they stand for.
type placeholders struct {
	session string
	values  map[string]string // value → placeholder
	ids     int
	states  int
}

var (
	uuidRE  = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	stateRE = regexp.MustCompile(`"requestState":"([^"]+)"`)
)

// out writes a line of guard's with placeholders. The answers of a batch
// may come in any order (JSON-RPC 2.0, section 6): they are written
// sorted.
func (p *placeholders) out(l string) string {
	if parts, err := wire.SplitBatch([]byte(l)); err == nil && len(parts) > 1 {
		sort.Slice(parts, func(i, j int) bool { return bytes.Compare(parts[i], parts[j]) < 0 })
		l = string(JoinBatch(parts))
	}
	l = stateRE.ReplaceAllStringFunc(l, func(m string) string {
		v := stateRE.FindStringSubmatch(m)[1]
		if _, ok := p.values[v]; !ok {
			p.states++
			p.values[v] = fmt.Sprintf("$STATE%d", p.states)
		}
		return `"requestState":"` + p.values[v] + `"`
	})
	return uuidRE.ReplaceAllStringFunc(l, func(v string) string {
		if v == p.session {
			return "$SESSION"
		}
		if _, ok := p.values[v]; !ok {
			p.ids++
			p.values[v] = fmt.Sprintf("$ID%d", p.ids)
		}
		return p.values[v]
	})
}

// in replaces the placeholders of a line the transcript sends.
func (p *placeholders) in(l string) string {
	if !strings.Contains(l, "$") {
		return l
	}
	pairs := [][2]string{{"$SESSION", p.session}}
	for v, name := range p.values {
		pairs = append(pairs, [2]string{name, v})
	}
	// Longer names first: $ID10 before $ID1.
	sort.Slice(pairs, func(i, j int) bool { return len(pairs[i][0]) > len(pairs[j][0]) })
	var r []string
	for _, pr := range pairs {
		r = append(r, pr[0], pr[1])
	}
	return strings.NewReplacer(r...).Replace(l)
}

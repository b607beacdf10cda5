package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// cutLink stands between the store and PostgreSQL, as a network does. It
// can lose the answer to the next COMMIT (the server committed; the
// store never hears so) and be cut off altogether for a while.
type cutLink struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu        sync.Mutex
	down      bool
	loseNext  bool          // lose the answer to the next COMMIT
	downAfter bool          // and go down as it is lost
	lost      chan struct{} // closed once an answer was lost
	conns     map[net.Conn]net.Conn
}

// newCutLink starts a link to the database at dbURL and returns it with
// the URL that reaches the database through it.
func newCutLink(t *testing.T, dbURL string) (*cutLink, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cutLink{t: t, ln: ln, target: u.Host, conns: map[net.Conn]net.Conn{}, lost: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		l.setDown(true)
	})
	go l.accept()
	u.Host = ln.Addr().String()
	return l, u.String()
}

func (l *cutLink) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns[c] = s
		l.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go l.answers(c, s)
	}
}

// answers relays the server's answers to the client, losing the one that
// completes a COMMIT when told to.
func (l *cutLink) answers(c, s net.Conn) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			l.mu.Lock()
			lose := l.loseNext && bytes.Contains(buf[:n], []byte("COMMIT\x00"))
			if lose {
				l.loseNext = false
				close(l.lost)
			}
			l.mu.Unlock()
			if lose {
				s.Close()
				if l.downAfter {
					l.setDown(true)
				}
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setDown cuts every connection and refuses new ones, or lets them in
// again.
func (l *cutLink) setDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	if down {
		for c, s := range l.conns {
			c.Close()
			s.Close()
		}
		clear(l.conns)
	}
}

// loseNextCommit arms the link: the answer to the next COMMIT is lost,
// and with thenDown the link goes down with it.
func (l *cutLink) loseNextCommit(thenDown bool) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loseNext, l.downAfter = true, thenDown
	l.lost = make(chan struct{})
	return l.lost
}

// openThrough opens the store on PostgreSQL through a cut link.
func openThrough(t *testing.T) (*DB, *cutLink, string) {
	t.Helper()
	direct := pgtest.Database(t)
	link, through := newCutLink(t, direct)
	db, err := Open(context.Background(), Options{Path: through, KeyPath: filepath.Join(t.TempDir(), "audit.key"),
		Durability: "normal", CheckpointEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// The link loses the answer to the next COMMIT on any of the store's
	// connections. The call index's writer commits 50 ms after a batch,
	// which may be when a test means the audit batch's to be lost: here it
	// writes what is pending at Close, or when a reader asks.
	db.ing.linger.Store(int64(time.Hour))
	return db, link, direct
}

// unconfirmed reads the store's corrections: the call ids of its
// guard/unconfirmed events, with their details, one line each.
func unconfirmed(t *testing.T, db *DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindEvent && r.Method == MethodUnconfirmed {
			out[r.CallID] += r.Detail + "\n"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// callRecords counts the records of a call.
func callRecords(t *testing.T, db *DB, callID string) int {
	t.Helper()
	n := 0
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.CallID == callID && r.Kind != guard.KindEvent {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// A COMMIT whose answer is lost while the database stays reachable: the
// store asks the database and the caller gets the truth (here, that the
// records are in), without being refused.
func TestACommitWhoseAnswerIsLostIsSettledByAskingTheDatabase(t *testing.T) {
	db, link, _ := openThrough(t)
	if err := <-db.AppendAsync(rec(0, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	firstCheckpoint(t, db) // its COMMIT is not the one lost
	lost := link.loseNextCommit(false)
	r := rec(1, guard.KindRequest)
	err := <-db.AppendAsync(r)
	select {
	case <-lost:
	default:
		t.Fatal("no COMMIT's answer was lost: the test did not test anything")
	}
	if err != nil {
		t.Fatalf("a committed append was refused: %v", err)
	}
	if n := callRecords(t, db, r.CallID); n != 1 {
		t.Fatalf("the call has %d records, want 1", n)
	}
	if u := unconfirmed(t, db); len(u) != 0 {
		t.Fatalf("corrections for an append that was answered truly: %v", u)
	}
	if err := <-db.AppendAsync(rec(2, guard.KindRequest)); err != nil {
		t.Fatalf("the next append: %v", err)
	}
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil || rep.Records != 3 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// A COMMIT whose answer is lost as the database becomes unreachable: the
// caller is refused once the store has waited long enough, and when the
// database is back and says the records are in, the log gains an event
// for each of them, with its call id, saying its caller was refused.
func TestACommittedAppendWhoseCallerWasRefusedIsRecordedAsSuch(t *testing.T) {
	db, link, _ := openThrough(t)
	if err := <-db.AppendAsync(rec(0, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	firstCheckpoint(t, db) // its COMMIT is not the one lost
	link.loseNextCommit(true)
	req, out := rec(1, guard.KindRequest), rec(1, guard.KindOutcome)
	out.Outcome = guard.OutcomeOK
	for _, r := range []*guard.Record{req, out} { // a caller the front authenticated
		r.User, r.UserEmail, r.UserGroups = caller.Subject, caller.Email, caller.Groups
	}
	err := <-db.AppendAsync(req, out)
	if !errors.Is(err, guard.ErrAuditWrite) || !strings.Contains(err.Error(), "could not be confirmed") {
		t.Fatalf("the append in doubt was answered %v, want a refusal saying its commit could not be confirmed", err)
	}
	link.setDown(false)
	// The corrections are appended by the store itself, once it knows.
	timeout := time.After(30 * time.Second)
	var u map[string]string
	for {
		db.ing.progMu.Lock()
		next := db.ing.progress // closed after the next batch
		db.ing.progMu.Unlock()
		if u = unconfirmed(t, db); len(u) > 0 {
			break
		}
		select {
		case <-next:
		case <-timeout:
			t.Fatal("no correction was recorded for the records committed after their caller was refused")
		}
	}
	if n := callRecords(t, db, req.CallID); n != 2 {
		t.Fatalf("the call has %d records, want its request and outcome", n)
	}
	detail := u[req.CallID]
	for _, want := range []string{req.ID, out.ID, "refused"} {
		if !strings.Contains(detail, want) {
			t.Errorf("the correction %s does not name %q", detail, want)
		}
	}
	// A correction is an event of the call's session: it names its user.
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Method == MethodUnconfirmed && (r.User != caller.Subject || r.UserEmail != caller.Email || !slices.Equal(r.UserGroups, caller.Groups)) {
			t.Errorf("the correction %s names the user %q %q %q", r.ID, r.User, r.UserEmail, r.UserGroups)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Records != 5 { // the first request, the call's two records, a correction for each
		t.Fatalf("verify: %d records, want 5", rep.Records)
	}
}

// A COMMIT that fails at the server (a deferred check): the batch is in
// doubt until the store has asked, and then refused, with nothing in the
// log and no correction.
func TestACommitThatFailedIsRefusedOnceTheDatabaseSaysSo(t *testing.T) {
	db, _, direct := openThrough(t)
	if err := <-db.AppendAsync(rec(0, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.arguments LIKE '%refuse-at-commit%' THEN RAISE EXCEPTION 'refused at commit'; END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER refuse_marked AFTER INSERT ON records DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION refuse_marked()`); err != nil {
		t.Fatal(err)
	}
	r := rec(1, guard.KindRequest)
	r.Arguments = `{"path":"refuse-at-commit"}`
	err = <-db.AppendAsync(r)
	if !errors.Is(err, guard.ErrAuditWrite) || !strings.Contains(err.Error(), "refused at commit") {
		t.Fatalf("an append whose COMMIT failed was answered %v", err)
	}
	if err := <-db.AppendAsync(rec(2, guard.KindRequest)); err != nil {
		t.Fatalf("the next append: %v", err)
	}
	if n := callRecords(t, db, r.CallID); n != 0 {
		t.Fatalf("the refused call has %d records", n)
	}
	if u := unconfirmed(t, db); len(u) != 0 {
		t.Fatalf("corrections for records not committed: %v", u)
	}
}

// firstCheckpoint waits until the checkpoint the store writes after its
// first records is kept.
func firstCheckpoint(t *testing.T, db *DB) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := db.LatestCheckpoint(context.Background())
		if err == nil {
			return
		}
		if !errors.Is(err, ErrNoCheckpoint) || time.Now().After(deadline) {
			t.Fatalf("the first checkpoint: %v", err)
		}
	}
}

package stream

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/guard-mcp/guard/stream/streamtest"
)

// Records arrive complete, in order, each once, as log records: the
// record as JSON in the body, its fields as attributes (the user's
// groups an array), a severity by its
// kind and decision, guard as the resource's service.
func TestOTLPRecordsArriveInOrder(t *testing.T) {
	oc := streamtest.NewOtelcol(t, nil)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 400)
	recs := committed(t, db)
	startStreamer(t, db, "A", entry(oc))
	oc.WaitRecords(len(recs))
	streamtest.CheckDelivery(t, oc.Seqs(), int64(len(recs)), true)
	for i, lr := range oc.Received() {
		r := recs[i]
		checkBody(t, []byte(lr.Body.StringValue), r)
		wantSev := map[Severity]int{Info: 9, Notice: 10, Warning: 13}[severity(r)]
		if lr.SeverityNumber != wantSev || lr.EventName != "guard.audit."+r.Kind {
			t.Errorf("record %d: severity %d event %q, want %d guard.audit.%s", r.Seq, lr.SeverityNumber, lr.EventName, wantSev, r.Kind)
		}
		for k, want := range map[string]string{"guard.id": r.ID, "guard.kind": r.Kind, "guard.call_id": r.CallID,
			"guard.server": r.Server, "guard.tool": r.Tool, "guard.decision": r.Decision, "guard.outcome": r.Outcome, "guard.decided_by": r.DecidedBy,
			"guard.user": r.User, "guard.user_email": r.UserEmail} {
			if lr.Attr(k) != want {
				t.Errorf("record %d: %s = %q, want %q", r.Seq, k, lr.Attr(k), want)
			}
		}
		if got := lr.Strings("guard.user_groups"); !slices.Equal(got, r.UserGroups) {
			t.Errorf("record %d: guard.user_groups = %q, want %q", r.Seq, got, r.UserGroups)
		}
		if lr.TimeUnixNano != strconv.FormatInt(r.Time.UnixNano(), 10) {
			t.Errorf("record %d: time %s, want %d", r.Seq, lr.TimeUnixNano, r.Time.UnixNano())
		}
		if lr.Resource["service.name"] != "guard" || lr.Resource["host.name"] != "test-host" {
			t.Errorf("resource %v", lr.Resource)
		}
	}
}

// The collector stopped while records are streamed, records appended
// while it is down, then started again: nothing is lost, the order is
// kept.
func TestOTLPReceiverOutage(t *testing.T) {
	testOutage(t, streamtest.NewOtelcol(t, nil))
}

// guard stopped and started again: it resumes after the cursor.
func TestOTLPResumesAfterRestart(t *testing.T) {
	testRestart(t, streamtest.NewOtelcol(t, nil))
}

// The same over HTTPS, the collector's certificate checked against a test
// CA.
func TestOTLPOverTLS(t *testing.T) {
	certs := streamtest.NewCerts(t)
	testDelivery(t, streamtest.NewOtelcol(t, certs), certs.Pool, 50)
}

package replicas

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
)

// alternating sends each request to the next replica in turn, so that
// two requests in a row never reach the same one.
type alternating struct {
	mu    sync.Mutex
	hosts []string
	next  int
	sent  []string // the replica each request went to
}

func (a *alternating) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	host := a.hosts[a.next%len(a.hosts)]
	a.next++
	a.sent = append(a.sent, host)
	a.mu.Unlock()
	r := req.Clone(req.Context())
	r.URL.Host, r.Host = host, ""
	return http.DefaultTransport.RoundTrip(r)
}

// alternatingClient connects a 2026-07-28 client (desk/1) to server
// through the replicas in turn (alternating), which answers every
// elicitation with answer and tells its question on asked.
func (c *cluster) alternatingClient(ctx context.Context, server string, answer map[string]any) (*mcp.ClientSession, *alternating, <-chan string) {
	c.t.Helper()
	rt := &alternating{}
	for _, r := range c.replicas {
		rt.hosts = append(rt.hosts, r.serve.Addr)
	}
	asked := make(chan string, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: answer}, nil
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.replicas[0].url(server), HTTPClient: &http.Client{Transport: rt}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		c.t.Fatal(err)
	}
	return cs, rt, asked
}

// On 2026-07-28 guard asks the person at the client about a held call
// with an input request of its own (approval.in_band: auto), and the
// client's next round, which carries the answer, may reach another
// replica: it is taken there as the same call, since every replica signs
// guard's requestState with the one key of the log.
func TestAnInBandAnswerOnAnotherReplica(t *testing.T) {
	c := newCluster(t, 2, "approval: {in_band: auto, wait: 40s}\n"+exampleServer())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, rt, asked := c.alternatingClient(ctx, "notes", map[string]any{"decision": "approve"})
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
	if err != nil || res.IsError || text(res) != "deleted welcome" {
		t.Fatalf("approved in the client's round, answered on the other replica: %q %v (requests went to %v)", text(res), err, rt.sent)
	}
	if q := <-asked; !strings.Contains(q, "delete_note") {
		t.Fatalf("the question: %q", q)
	}
	c.waitRecords("the in-band decision and the outcome", func(recs []*guard.Record) bool {
		var decided, ran bool
		for _, r := range recs {
			decided = decided || r.Kind == guard.KindDecision && r.DecidedBy == "user at desk/1" && r.Decision == guard.ApprovalApproved
			ran = ran || r.Kind == guard.KindOutcome && r.Tool == "delete_note" && r.Outcome == "ok"
		}
		return decided && ran
	})
	c.stopAndVerify()
}

// On 2026-07-28 a server answers a call input_required and the client
// calls again with what it asked: the same call, decided once. Held for a
// person and approved, its next round may reach another replica, which
// continues it as that call, under that decision, without holding it
// again.
func TestALaterRoundOnAnotherReplica(t *testing.T) {
	c := newCluster(t, 2, "approval: {wait: 15s}\nservers:\n  shared:\n    url: "+guardtest.Fixture(t, true)+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, rt, asked := c.alternatingClient(ctx, "shared", map[string]any{"name": "erin"})
	defer cs.Close()
	const tool = "test_input_required_result_elicitation"
	got := callInBackground(ctx, cs, tool, map[string]any{})
	held := c.pending(tool)
	if out, code := c.guard("approvals", "approve", held.ID, "--by", "carol"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	res := <-got
	if res.err != nil || res.r.IsError {
		t.Fatalf("the call approved once, its next round on the other replica: %q %v (requests went to %v)", text(res.r), res.err, rt.sent)
	}
	<-asked
	recs := c.waitRecords("the call's two rounds, ending ok", func(recs []*guard.Record) bool {
		for _, r := range recs {
			if r.Kind == guard.KindOutcome && r.CallID == held.ID && r.Outcome == "ok" {
				return true
			}
		}
		return false
	})
	var requests int
	for _, r := range recs {
		if r.Kind == guard.KindRequest && r.Tool == tool {
			requests++
			if r.CallID != held.ID {
				t.Errorf("a round recorded as another call (%s), not as the approved call %s", r.CallID, held.ID)
			}
		}
	}
	if requests != 2 {
		t.Errorf("%d requests of %s in the audit log, want its two rounds", requests, tool)
	}
	if out, _ := c.guard("approvals", "list", "--format", "jsonl"); strings.Contains(out, tool) {
		t.Fatalf("the next round was held again:\n%s", out)
	}
	c.stopAndVerify()
}

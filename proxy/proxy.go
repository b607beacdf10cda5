// Package proxy relays MCP messages between a client and a server and
// intercepts what guard must decide on or record: it frames and classifies
// messages, maps request ids where guard's own messages require it, keeps the
// tool catalog of a session, asks policy about every tools/call, holds calls
// for a person, and records every request and its outcome before it moves on.
//
// The relay never imports the store or the UI: it records, persists the
// catalog and waits for decisions through the small interfaces declared here.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
	"go.opentelemetry.io/otel/trace"
)

// Interceptor stands between the two peers Run relays: it takes every
// message either one sends, and decides what each receives, through two
// outboxes of its own that Run drains. *Session is guard's.
type Interceptor interface {
	// OnClient takes the client's next message; err, when set, is about
	// that message alone (a *BadMessage or a *wire.TooLongError).
	OnClient(msg wire.Message, err error)
	// OnServer takes the server's next message, as OnClient.
	OnServer(msg wire.Message, err error)
	// ServeClient writes the client's outbox to client until ServerEnded
	// closed it, and returns the first write error.
	ServeClient(client Conn) error
	// ServeServer writes the server's outbox to server until ClientEnded
	// closed it, and returns the first write error.
	ServeServer(server Conn) error
	// Left is closed when the interceptor finds the client gone while its
	// input is still open (a write to it failed).
	Left() <-chan struct{}
	// ClientEnded tells that the client is done: its input ended, or Left
	// was closed. It returns once what the client sent before is decided
	// and the server's outbox is closed.
	ClientEnded(client Conn)
	// ServerEnded tells that the server's output ended and how the server
	// ended (code, and words for people); it answers what still waited on
	// the server and closes the client's outbox.
	ServerEnded(code int, status string)
}

var _ Interceptor = (*Session)(nil)

// ender is a server Conn that knows when its server ended: Run waits for
// Ended rather than for the end of the server's output (a child process
// that exits may leave its output open in a process it started).
type ender interface {
	Ended() <-chan struct{}
}

// statusTeller is a server Conn that says how its server ended, for
// ServerEnded (default: 0, "status 0").
type statusTeller interface {
	Status() (code int, status string)
}

// Run relays between client and server through ic until the server's
// output ends (or, for a server Conn that knows, the server ends), and
// everything for the client is written; it returns the first error
// writing to the client. The server's Conn is closed once ic has nothing
// more for it; the client's stays open for its owner. The peers are read
// with ctx's values but not its cancellation: a session ends when its
// peers do.
func Run(ctx context.Context, client, server Conn, ic Interceptor) error {
	ctx = context.WithoutCancel(ctx)
	go func() {
		_ = ic.ServeServer(server)
		server.Close()
	}()
	clientWritten := make(chan error, 1)
	go func() { clientWritten <- ic.ServeClient(client) }()
	read := make(chan struct{})
	go func() {
		defer close(read)
		relay(ctx, client, ic.OnClient)
	}()
	go func() {
		select {
		case <-read:
		case <-ic.Left():
		}
		ic.ClientEnded(client)
	}()
	readServer := make(chan struct{})
	go func() {
		defer close(readServer)
		relay(ctx, server, ic.OnServer)
	}()
	if e, ok := server.(ender); ok {
		<-e.Ended()
	} else {
		<-readServer
	}
	code, status := 0, "status 0"
	if e, ok := server.(statusTeller); ok {
		code, status = e.Status()
	}
	ic.ServerEnded(code, status)
	return <-clientWritten
}

// relay hands each message c reads to on, until c's input ends.
func relay(ctx context.Context, c Conn, on func(wire.Message, error)) {
	for {
		msg, err := c.Read(ctx)
		if err != nil && !aboutOne(err) {
			return
		}
		on(msg, err)
	}
}

// aboutOne reports whether a Read error is about one message, the next
// Read going on.
func aboutOne(err error) bool {
	var bad *BadMessage
	var tl *wire.TooLongError
	return errors.As(err, &bad) || errors.As(err, &tl)
}

// ServeClient is Interceptor's: it also settles the holds of requests
// whose client went away, for a client Conn that tells.
func (s *Session) ServeClient(client Conn) error {
	s.toClient.failed = func(error) { s.clientGone(goneWriteFailed) }
	if d, ok := client.(Departures); ok {
		go s.watchDepartures(d)
	}
	return s.toClient.run(client)
}

// ServeServer is Interceptor's.
func (s *Session) ServeServer(server Conn) error {
	err := s.toServer.run(server)
	if err != nil {
		s.opts.Logger.Debug("writing to the server", "err", err)
	}
	return err
}

// Left is Interceptor's.
func (s *Session) Left() <-chan struct{} { return s.left.ch }

// ClientEnded is Interceptor's: a client whose input ended is gone (its
// holds settled at once) unless its Conn says otherwise, and the server's
// input is closed once the calls it sent before are decided and everything
// queued for the server is written.
func (s *Session) ClientEnded(client Conn) {
	select {
	case <-s.left.ch:
	default:
		if why, gone := InputEnded(client); gone {
			s.clientGone(why)
		}
	}
	s.waitDecisions(s.opts.RefreshTimeout + s.opts.ApprovalWait)
	s.toServer.close()
}

// ServerEnded is Interceptor's.
func (s *Session) ServerEnded(code int, status string) {
	s.ServerGone(code, status)
	s.toClient.close()
}

// Recorder makes audit records durable. AppendAsync must send exactly one
// value on the returned channel once the records are committed (nil) or
// could not be (an error): the relay forwards nothing it could not record.
type Recorder interface {
	AppendAsync(recs ...*guard.Record) <-chan error
}

// ContextRecorder is a Recorder that is also given the context of the
// call whose records it appends, which holds the call's span when the
// call is traced: what it counts of the call can name the call's trace.
// A traced call's records go through AppendContext.
type ContextRecorder interface {
	Recorder
	AppendContext(ctx context.Context, recs ...*guard.Record) <-chan error
}

// CatalogStore keeps every tool definition a server has shown, and how each
// stands: accepted (the baseline, or by a person), pending or rejected.
type CatalogStore interface {
	// RecordTools records a listing; acceptNew accepts tools that appear
	// after the baseline without a person.
	RecordTools(ctx context.Context, server string, tools []guard.Tool, seen time.Time, acceptNew bool) error
	// Review is nil for a definition never recorded.
	Review(ctx context.Context, server, name, pin string) (*guard.Review, error)
	// AcceptedTool is the definition of a tool last accepted, or nil.
	AcceptedTool(ctx context.Context, server, name string) (*guard.Tool, error)
	// ReviewedTools is how a server's definitions stand (by name, NUL,
	// pin) and each tool's definition last accepted.
	ReviewedTools(ctx context.Context, server string) (states map[string]string, accepted map[string]*guard.Tool, err error)
}

// Contracts checks calls and results against the schemas a tool declares.
// An error means the schema itself is unusable: the call fails closed.
type Contracts interface {
	// Arguments returns how the call's arguments break the tool's
	// inputSchema ("" if not); it may keep them decoded in call.Args.
	Arguments(tool *guard.Tool, call *guard.Call) (string, error)
	// Result returns how a final result breaks the tool's outputSchema
	// ("" if not, or when the tool declares none).
	Result(tool *guard.Tool, result []byte) (string, error)
}

// Decider is the policy: a function of the call, its tool's pinned
// definition and the rules in force. It has one effect: a call a rate
// limit counts takes a token from a bucket in the store (policy.Engine).
type Decider interface {
	Decide(call *guard.Call) guard.Verdict
	// Hides reports whether a listing leaves out the tool call names,
	// for its caller: the rules deny every call of it, whatever the
	// arguments (unknown here), and the verdict that does
	// (policy.hide_denied; conservative, and never in monitor mode).
	Hides(call *guard.Call) (bool, guard.Verdict)
}

// Holds keeps calls that wait for a person. approvals.Manager implements it.
type Holds interface {
	Consume(ctx context.Context, server, tool, digest, pin, policyVersion, session string) (*guard.Approval, bool, error)
	Hold(ctx context.Context, a *guard.Approval) (*guard.Approval, bool, error)
	Await(ctx context.Context, id string, progress func(msg string)) (guard.WaitResult, error)
	Withdraw(ctx context.Context, id, reason string) error
	Decide(ctx context.Context, id string, approve bool, by, reason string) (*guard.Approval, error)
	Get(ctx context.Context, id string) (*guard.Approval, error)
	// SessionEnded settles the open approvals of a session whose client
	// is gone, for the reason given; ClientGone one such call's.
	SessionEnded(ctx context.Context, session, reason string) error
	ClientGone(ctx context.Context, id, reason string) error
}

// Redactor masks secrets in JSON text before it is recorded.
type Redactor interface {
	Redact(raw []byte) string
}

// Options configure a relay session. Recorder and Decider are required;
// the rest have defaults or do nothing when nil.
type Options struct {
	// Server is the wrapped server's name, as audit records and rules see it.
	Server string
	// ClientName, when set, is the client as records and rules see it:
	// the name of the bearer token it authenticated with.
	ClientName string
	// Caller is who the front authenticated for this session (a verified
	// access token); zero where no one did (stdio, static tokens).
	Caller guard.Identity
	// HoldScope, when set, stands for the session where approvals scoped
	// to a session are concerned: the session-less revision (2026-07-28)
	// has no session, and a client's calls may reach any replica, so
	// there its holds belong to the client (as the front knows it), which
	// every replica names alike. Such a relay ending does not end its
	// client's holds.
	HoldScope string
	// MaxMessage is the largest line accepted from either side (default 64 MiB).
	MaxMessage int
	// MaxRequest is the largest message of the client passed to the server
	// (default 16 MiB, what go-sdk servers read: a longer line ends their
	// session). A longer request is answered -32600, a notification
	// dropped, an answer to the server's request replaced by guard's error.
	MaxRequest int
	// MaxResult is the most bytes of a result kept in an audit record
	// (default 64 KiB); larger results are recorded by size and digest.
	MaxResult int
	Recorder  Recorder
	Catalog   CatalogStore
	Decider   Decider
	Holds     Holds
	Redactor  Redactor
	Contracts Contracts
	// MaskResults, when set, masks secrets in the results of tools/call,
	// resources/read and prompts/get before the client reads them
	// (redact_results: true).
	MaskResults func(msg []byte) ([]byte, int)
	// MaskOwnSecrets, when set, masks guard's own secrets in the complete
	// arguments a pending approval keeps (the audit's are redacted by
	// Redactor): the approver needs to see the call, never guard's keys.
	MaskOwnSecrets func(msg []byte) ([]byte, int)
	// ScanTool returns what a scan of a tool definition's descriptions
	// finds; nil scans nothing.
	ScanTool func(server string, def []byte) []guard.Flag
	// AcceptNewTools accepts tools that appear after the server's first
	// listing without a person (new_tools: allow).
	AcceptNewTools bool
	// Listing, when set, says what tools/list shows, as the
	// configuration in force has it (review.listing): ListAccepted (the
	// default) each tool's last accepted definition, leaving out new
	// tools that wait for review; ListAsServed the server's listing as
	// it is.
	Listing func() string
	// HideDenied, when set, says whether listings leave out the tools
	// the rules deny to the caller for every argument, as the
	// configuration in force has it (policy.hide_denied; the Decider's
	// Hides decides which).
	HideDenied func() bool
	// Watch, when set, tells the session when a review or the policy
	// changed, so that it can tell its client when its listing would
	// show something else.
	Watch ListingWatch
	// OutputWarn passes results that break the outputSchema on, recording
	// the violation (output: warn); by default they are replaced by an
	// error (output: enforce).
	OutputWarn bool
	// IgnoreBadSchemas lets calls of a tool whose schema does not compile
	// go on unvalidated (bad_schema: ignore); by default they are refused.
	IgnoreBadSchemas bool
	// InBand also asks the person at the client about a held call, with a
	// form elicitation, when the client supports one (approval.in_band:
	// auto). Off by default: a client may answer without a person.
	InBand bool
	// Rounds, when set, keeps the rounds of 2026-07-28 calls for every
	// process on the database besides the session: the client's next
	// round may reach another replica, which continues the call there.
	Rounds RoundStore
	// StateKey signs the requestState of guard's own input requests
	// (2026-07-28). Replicas of one log share one, so that a round that
	// lands on another replica still matches; nil: a random key of the
	// session's.
	StateKey []byte
	// MaxPending caps the calls of one session waiting for approval at
	// once (default 20); more are denied rather than queued.
	MaxPending int
	Logger     *slog.Logger
	Now        func() time.Time
	// Tracer, when set, traces every relayed request (see trace.go) and
	// passes its trace context on to the server in the request's _meta;
	// nil traces nothing and changes nothing on the wire.
	Tracer trace.Tracer
	// HashAtCommit says that the Recorder's records carry their chain
	// hash once durable (PostgreSQL): a record span and the call's then
	// show it. (On SQLite it is computed later, and never waited for.)
	HashAtCommit bool
	// ProgressEvery is how often a held call with a progressToken gets a
	// progress notification (default 5s).
	ProgressEvery time.Duration
	// ApprovalTimeout is shown to the client in the "expired" answer.
	ApprovalTimeout time.Duration
	// ApprovalWait bounds how long a held call blocks; when the client
	// ends its input, guard waits that long for held calls to be answered.
	ApprovalWait time.Duration
	// RefreshTimeout bounds guard's own requests to the server, the
	// tools/list it sends when a call names a tool it has not seen
	// (default 30s).
	RefreshTimeout time.Duration
	// ShareListens says that the server's connection carries the
	// requests of several clients (the session-less revision's relay to
	// a process): guard then serves their listens for list changes and
	// resources from listens of its own (see listenHub).
	ShareListens bool
}

// RoundStore keeps the 2026-07-28 calls that a server answered
// input_required, so that the client's next round continues the call as
// the same call, under the same decision, on any replica; store.Replicas
// implements it. A round is continued once.
type RoundStore interface {
	NoteRound(ctx context.Context, key string, r guard.Round, expires time.Time) error
	TakeRound(ctx context.Context, key string) (*guard.Round, error)
}

// defaultMaxMessage is the largest message accepted when none is set,
// defaultMaxRequest the largest passed to a server.
const (
	defaultMaxMessage = 64 << 20
	defaultMaxRequest = 16 << 20
)

// WithDefaults returns o with the defaults a session takes for what o
// leaves unset (bounds, Logger, Now, intervals, timeouts): what
// NewSession runs with. A package that runs a session's transport (a
// child process, an upstream) reads the same Logger and MaxMessage.
func (o Options) WithDefaults() Options {
	o.fill()
	return o
}

func (o *Options) fill() {
	if o.MaxMessage <= 0 {
		o.MaxMessage = defaultMaxMessage
	}
	if o.MaxRequest <= 0 {
		o.MaxRequest = defaultMaxRequest
	}
	if o.MaxResult <= 0 {
		o.MaxResult = 64 << 10
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	if o.ApprovalTimeout <= 0 {
		o.ApprovalTimeout = 10 * time.Minute
	}
	if o.ApprovalWait <= 0 {
		o.ApprovalWait = 50 * time.Second
	}
	if o.RefreshTimeout <= 0 {
		o.RefreshTimeout = 30 * time.Second
	}
}

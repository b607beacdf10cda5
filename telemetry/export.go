package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/otlp"
	"github.com/guard-mcp/guard/internal/repeated"
	"google.golang.org/protobuf/proto"
)

// Bounds of the pipeline: the spans waiting (past them, spans are
// dropped), and the most in one export request (the SDK's defaults).
const (
	maxQueue = 2048
	maxBatch = 512
)

// pipeline takes ended spans into a bounded queue and sends them, from
// one goroutine, in batches: maxBatch spans, or what waited BatchTimeout.
// Ending a span costs an append under a lock; the goroutine is woken by
// the first span of a batch and by a full one only.
type pipeline struct {
	mu      sync.Mutex
	queue   []*span
	stopped bool // by Shutdown: spans that end now are dropped
	left    int  // spans still queued when Shutdown's time was over

	wake    chan struct{} // the queue got its first span, or a batch's worth
	stop    chan struct{} // closed by Shutdown: send what is queued, and return
	done    chan struct{} // closed by run as it returns
	ctx     context.Context
	cancel  context.CancelFunc // when Shutdown's grace is over
	timeout time.Duration

	endpoint string
	client   *otlp.Client
	resource []byte // the encoded Resource
	logger   *slog.Logger
	req      []byte // the last request's buffer, reused
	// down is exports failing: logged as it starts, lasts and ends.
	down *repeated.Condition

	ended, exported, failed, dropped atomic.Int64
}

func newPipeline(cfg Config, o Options) (*pipeline, error) {
	endpoint, err := otlp.SignalURL(cfg.OTLP, "traces")
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp %q: %w", guard.DisplayURL(cfg.OTLP), err)
	}
	client, err := otlp.New(otlp.Config{URL: endpoint, Signal: "traces", Timeout: exportTimeout, Getenv: o.Getenv, Headers: cfg.Headers})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	attrs := map[string]string{"service.name": "guard", "host.name": o.Hostname}
	if o.Version != "" {
		attrs["service.version"] = o.Version
	}
	res, err := otlp.Resource(o.Getenv, attrs)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	resource, err := proto.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("telemetry: encoding the resource: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	down := &repeated.Condition{Logger: o.Logger, Level: slog.LevelWarn,
		Msg: "traces are not delivered: spans are dropped until the receiver takes them again", What: "traces delivery"}
	return &pipeline{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel,
		timeout: o.BatchTimeout, endpoint: endpoint, client: client, resource: resource, logger: o.Logger, down: down}, nil
}

// enqueue takes an ended span, or drops it when the queue is full or the
// pipeline stopped.
func (p *pipeline) enqueue(s *span) {
	p.ended.Add(1)
	p.mu.Lock()
	if p.stopped || len(p.queue) >= maxQueue {
		p.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	p.queue = append(p.queue, s)
	n := len(p.queue)
	p.mu.Unlock()
	if n == 1 || n == maxBatch {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func (p *pipeline) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// take moves up to maxBatch spans from the queue into batch.
func (p *pipeline) take(batch []*span) []*span {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(len(p.queue), maxBatch)
	batch = append(batch[:0], p.queue[:n]...)
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	return batch
}

// run sends batches until stop, then what is still queued.
func (p *pipeline) run() {
	defer close(p.done)
	timer := time.NewTimer(p.timeout)
	timer.Stop()
	var batch []*span
	for {
		select {
		case <-p.stop:
			p.drain(batch)
			return
		default:
		}
		switch n := p.queued(); {
		case n == 0:
			select {
			case <-p.wake:
			case <-p.stop:
				p.drain(batch)
				return
			}
			continue
		case n < maxBatch:
			// Wait out the batch's time, or until it is full (a wake
			// left from the batch before is only a look at the queue).
			timer.Reset(p.timeout)
		wait:
			for p.queued() < maxBatch {
				select {
				case <-p.wake:
				case <-timer.C:
					break wait
				case <-p.stop:
					timer.Stop()
					p.drain(batch)
					return
				}
			}
			timer.Stop()
		}
		batch = p.take(batch)
		p.export(batch)
		clear(batch)
	}
}

// drain sends what is queued once stopped, until the queue is empty or
// Shutdown's grace is over; what is left then is dropped.
func (p *pipeline) drain(batch []*span) {
	for p.ctx.Err() == nil {
		if batch = p.take(batch); len(batch) == 0 {
			return
		}
		p.export(batch)
		clear(batch)
	}
	p.mu.Lock()
	p.left = len(p.queue)
	p.dropped.Add(int64(p.left))
	p.queue = nil
	p.mu.Unlock()
}

// export sends one batch. A failure is counted and logged, once when they
// start and once when they end; the batch is not sent again.
func (p *pipeline) export(spans []*span) {
	p.req = appendRequest(p.req[:0], p.resource, spans)
	err := p.client.Export(p.ctx, p.req)
	if partial := (*otlp.PartialError)(nil); errors.As(err, &partial) {
		p.exported.Add(int64(len(spans)) - partial.Rejected)
		p.failed.Add(partial.Rejected)
		if partial.Rejected > 0 {
			p.logger.Warn("the OTLP receiver refused some spans", "receiver", guard.DisplayURL(p.endpoint), "err", err)
		}
		err = nil
	} else if err == nil {
		p.exported.Add(int64(len(spans)))
	} else {
		p.failed.Add(int64(len(spans)))
	}
	if err != nil {
		p.down.Failed("receiver", guard.DisplayURL(p.endpoint), "err", err)
	} else {
		p.down.Ok("receiver", guard.DisplayURL(p.endpoint), "failed_spans", p.failed.Load())
	}
}

// shutdown stops taking spans, sends those queued within ctx, and closes
// the client. It reports the spans it could not send in time.
func (p *pipeline) shutdown(ctx context.Context) error {
	p.mu.Lock()
	already := p.stopped
	p.stopped = true
	p.mu.Unlock()
	if !already {
		close(p.stop)
	}
	stopCancel := context.AfterFunc(ctx, p.cancel)
	<-p.done
	stopCancel()
	p.client.Close()
	if p.left > 0 {
		return fmt.Errorf("telemetry: %d spans not sent within the shutdown's time: %w", p.left, ctx.Err())
	}
	return nil
}

package remote

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/guard-mcp/guard/wire"
)

// The legacy HTTP+SSE transport (2024-11-05) toward an upstream: one GET
// event stream carries every server message, and messages are POSTed to
// the endpoint its first event names.

// openLegacy opens the legacy transport's event stream and waits for the
// endpoint event; the stream's messages go to the relay until it ends.
func (u *upstream) openLegacy() {
	req, err := u.newRequest(http.MethodGet, u.rm.URL, nil)
	if err != nil {
		u.sseErr = err
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := u.rm.Client.Do(req)
	if err != nil {
		u.sseErr = err
		return
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		u.sseErr = fmt.Errorf("HTTP %d", resp.StatusCode)
		return
	}
	endpoint := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		readEvents(resp.Body, u.max, func(event string, data []byte) {
			if event == "endpoint" {
				select {
				case endpoint <- string(data):
				default:
				}
				return
			}
			u.emit(data)
		}, u.tooLong)
		close(endpoint)
	}()
	select {
	case e, ok := <-endpoint:
		if !ok {
			u.sseErr = fmt.Errorf("the event stream ended before naming an endpoint")
			return
		}
		base, err := url.Parse(u.rm.URL)
		if err != nil {
			u.sseErr = err
			return
		}
		ref, err := url.Parse(e)
		if err != nil {
			u.sseErr = err
			return
		}
		u.sseEndpoint = base.ResolveReference(ref).String()
	case <-time.After(30 * time.Second):
		u.sseErr = fmt.Errorf("no endpoint event within 30s")
	}
}

// postLegacy sends one message to the legacy transport's endpoint; the
// answer comes on the event stream.
func (u *upstream) postLegacy(m wire.Message, line []byte) {
	u.sseOnce.Do(u.openLegacy)
	if u.sseErr != nil {
		u.fail(m, "the remote server's event stream: "+u.sseErr.Error())
		return
	}
	req, err := u.newRequest(http.MethodPost, u.sseEndpoint, line)
	if err != nil {
		u.fail(m, err.Error())
		return
	}
	u.traceHeaders(req, m)
	resp, err := u.rm.Client.Do(req)
	if err != nil {
		u.fail(m, "the remote server could not be reached: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		u.fail(m, fmt.Sprintf("the remote server answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b))))
	}
}

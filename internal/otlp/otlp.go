// Package otlp sends OpenTelemetry export requests over OTLP/HTTP: a
// Client posts an encoded request (protobuf) to a signal's URL and
// interprets the answer, success (2xx), partial success, or failure. Each
// signal builds its own messages with the message types of
// go.opentelemetry.io/proto/otlp/{common,resource,logs,trace,metrics}
// (the audit stream's logs today) and wraps them with AppendRequest.
//
// It does not use the OpenTelemetry SDK's exporters: their request and
// response types live in go.opentelemetry.io/proto/otlp/collector/...,
// whose packages also hold the gRPC services and their HTTP gateways, so
// that any of the exporters links google.golang.org/grpc and grpc-gateway
// into guard, about 3 MB of a release binary held to 35 MB. The request
// wrapper is one repeated field and the response two scalars, written and
// read here with protowire.
//
// What the configuration says comes first; the standard variables fill in
// the rest as the SDK's exporters read them: OTEL_EXPORTER_OTLP_HEADERS,
// _COMPRESSION (gzip), _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY,
// each also per signal (OTEL_EXPORTER_OTLP_LOGS_HEADERS, ...), which takes
// precedence, and OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME for a
// resource (Resource). A variable that cannot be used is an error of New
// or Resource, not a warning that leaves the receiver without its API key.
package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Config says where and how a Client sends.
type Config struct {
	// URL is the signal's full URL, http or https (http://HOST:4318/v1/logs).
	URL string
	// Signal is "logs", "traces" or "metrics": it names the variables that
	// take precedence for this signal (OTEL_EXPORTER_OTLP_LOGS_HEADERS).
	Signal string
	// RootCAs verify an https receiver (default: the certificates
	// OTEL_EXPORTER_OTLP_CERTIFICATE names, else the system's).
	RootCAs *x509.CertPool
	// Timeout bounds one request, answer included (default 10 s, the SDK's).
	Timeout time.Duration
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
	// Headers are sent with every request, over those
	// OTEL_EXPORTER_OTLP_HEADERS names (the configuration's come first).
	// They may hold credentials: nothing here logs or shows them.
	Headers map[string]string
}

// Client posts export requests to one receiver; it is safe for
// concurrent use.
type Client struct {
	url    string
	http   *http.Client
	header http.Header
	gzip   bool
	// gzips holds gzip writers: each costs about 800 KB to set up.
	gzips sync.Pool
}

// contentType is OTLP/HTTP's binary encoding.
const contentType = "application/x-protobuf"

// Bounds on what is read of an answer: a partial success's message, or
// the reason for a failure.
const (
	maxAnswer = 4 << 20
	maxReason = 64 << 10
)

// New checks cfg and the variables that complete it and returns a client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otlp: %q is not an http(s) URL", cfg.URL)
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	env := envReader{getenv: cfg.Getenv, signal: strings.ToUpper(cfg.Signal)}
	header, err := env.headers()
	if err != nil {
		return nil, err
	}
	for k, v := range cfg.Headers {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("otlp: header %q is not a valid header", k)
		}
		header.Set(k, v)
	}
	header.Set("Content-Type", contentType)
	header.Set("User-Agent", "guard")
	c := &Client{url: cfg.URL, header: header}
	switch v, name := env.get("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		c.gzip = true
		header.Set("Content-Encoding", "gzip")
	default:
		return nil, fmt.Errorf("otlp: %s=%q: want gzip or none", name, v)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" {
		if tr.TLSClientConfig, err = env.tls(cfg.RootCAs); err != nil {
			return nil, err
		}
	}
	c.http = &http.Client{Transport: tr, Timeout: cfg.Timeout}
	return c, nil
}

// SignalURL is the URL of a signal's export requests at the OTLP/HTTP
// receiver whose base URL raw is (http://HOST:4318, or the signal's full
// URL already: http://HOST:4318/v1/traces): neither the user nor the
// query of raw is kept, the URL being the receiver's and the signal's.
// signal is "logs", "traces" or "metrics".
func SignalURL(raw, signal string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("use http(s)://HOST:PORT")
	}
	path := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(path, "/v1/"+signal) {
		path += "/v1/" + signal
	}
	return u.Scheme + "://" + u.Host + path, nil
}

// PartialError is a partial success: the receiver took the request and
// rejected Rejected of its items (log records, spans, data points) for
// good, saying Message; sending them again would not change that. A
// receiver may also answer a partial success that rejects nothing, with a
// warning as its Message.
type PartialError struct {
	Rejected int64
	Message  string
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("OTLP partial success: %d rejected: %s", e.Rejected, e.Message)
}

// StatusError is a receiver's refusal of a request: its HTTP status, and
// the reason it gave (the message of a google.rpc.Status, or the text of
// its answer).
type StatusError struct {
	Code   int
	Status string
	Reason string
}

func (e *StatusError) Error() string {
	reason := e.Reason
	if reason == "" {
		reason = "(no reason given)"
	}
	return fmt.Sprintf("HTTP %s: %s", e.Status, reason)
}

// Export posts body, an encoded export request (AppendRequest), and
// returns nil once the receiver answered success. It returns a
// *PartialError when the receiver took the request but rejected some of
// it, a *StatusError when it refused it, and otherwise the error of the
// request (the receiver unreachable, the timeout). It does not retry:
// what to send again, and when, is the caller's.
func (c *Client) Export(ctx context.Context, body []byte) error {
	var rd io.Reader = bytes.NewReader(body)
	if c.gzip {
		var b bytes.Buffer
		gz, _ := c.gzips.Get().(*gzip.Writer)
		if gz == nil {
			gz = gzip.NewWriter(&b)
		} else {
			gz.Reset(&b)
		}
		_, _ = gz.Write(body) // a bytes.Buffer takes everything
		_ = gz.Close()
		c.gzips.Put(gz)
		rd = &b
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, rd)
	if err != nil {
		return fmt.Errorf("otlp: %w", err)
	}
	req.Header = c.header.Clone()
	resp, err := c.http.Do(req)
	if err != nil {
		return err // *url.Error: it names the request
	}
	defer resp.Body.Close()
	isProto := false
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mt == contentType {
		isProto = true
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxReason))
		return &StatusError{Code: resp.StatusCode, Status: resp.Status, Reason: reason(answer, isProto)}
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil || !isProto {
		// The receiver has the request (2xx): an answer cut short or
		// in another encoding does not take that back.
		return nil
	}
	if rejected, msg := partialSuccess(answer); rejected != 0 || msg != "" {
		return &PartialError{Rejected: rejected, Message: msg}
	}
	return nil
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// AppendRequest appends to b an export request holding items, each a
// signal's ResourceLogs, ResourceSpans or ResourceMetrics: the three
// requests (ExportLogsServiceRequest, ExportTraceServiceRequest,
// ExportMetricsServiceRequest) are all field 1, repeated, of those.
func AppendRequest(b []byte, items ...proto.Message) ([]byte, error) {
	opts := proto.MarshalOptions{UseCachedSize: true}
	for _, m := range items {
		n := proto.Size(m) // caches the sizes UseCachedSize reads
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		var err error
		if b, err = opts.MarshalAppend(b, m); err != nil {
			return nil, fmt.Errorf("otlp: encoding the request: %w", err)
		}
	}
	return b, nil
}

// partialSuccess reads an export response (ExportLogsServiceResponse and
// the others: partial_success, field 1, holding rejected items as field 1
// and error_message as field 2). An answer it cannot read rejects nothing.
func partialSuccess(b []byte) (rejected int64, msg string) {
	ps, ok := field(b, 1, protowire.BytesType)
	if !ok {
		return 0, ""
	}
	if v, ok := field(ps, 1, protowire.VarintType); ok {
		n, _ := protowire.ConsumeVarint(v)
		rejected = int64(n)
	}
	if v, ok := field(ps, 2, protowire.BytesType); ok {
		msg = string(v)
	}
	return rejected, msg
}

// reason is what a refusal says: the message (field 2) of the
// google.rpc.Status a protobuf answer holds, else the answer's text.
func reason(answer []byte, isProto bool) string {
	if isProto {
		if msg, ok := field(answer, 2, protowire.BytesType); ok {
			return string(msg)
		}
	}
	if !utf8.Valid(answer) {
		return fmt.Sprintf("(%d bytes)", len(answer))
	}
	return strings.TrimSpace(string(answer))
}

// field returns the last occurrence of field num of type typ in the
// message b: a varint's bytes, or a length-delimited field's content.
func field(b []byte, num protowire.Number, typ protowire.Type) (v []byte, ok bool) {
	for len(b) > 0 {
		n, t, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return v, ok
		}
		valLen := protowire.ConsumeFieldValue(n, t, b[tagLen:])
		if valLen < 0 {
			return v, ok
		}
		if n == num && t == typ {
			v, ok = b[tagLen:tagLen+valLen], true
			if t == protowire.BytesType {
				v, _ = protowire.ConsumeBytes(v)
			}
		}
		b = b[tagLen+valLen:]
	}
	return v, ok
}

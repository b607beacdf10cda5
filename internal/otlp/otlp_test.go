package otlp_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/internal/otlp"
	"github.com/guard-mcp/guard/stream/streamtest"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// env is an environment of the variables given.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// request is an export request of one log record, body and guard.seq 1,
// from the resource of attrs.
func request(t *testing.T, body string, attrs map[string]string, getenv func(string) string) []byte {
	t.Helper()
	res, err := otlp.Resource(getenv, attrs)
	if err != nil {
		t.Fatal(err)
	}
	rl := &logspb.ResourceLogs{Resource: res, ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
		Body: otlp.StringValue(body),
		Attributes: []*commonpb.KeyValue{{Key: "guard.seq",
			Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 1}}}},
	}}}}}
	b, err := otlp.AppendRequest(nil, rl)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A request reaches a real collector over TLS, gzipped, the collector's
// CA read from the file OTEL_EXPORTER_OTLP_CERTIFICATE names; a signal's
// variable takes precedence over the general one, and the resource has
// OTEL_RESOURCE_ATTRIBUTES' attributes beside the caller's, which win.
func TestExportReachesCollector(t *testing.T) {
	certs := streamtest.NewCerts(t)
	oc := streamtest.NewOtelcol(t, certs)
	getenv := env(map[string]string{
		"OTEL_EXPORTER_OTLP_LOGS_COMPRESSION": "gzip",
		"OTEL_EXPORTER_OTLP_COMPRESSION":      "none",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":      certs.CAFile,
		"OTEL_RESOURCE_ATTRIBUTES":            "deployment.environment=prod%20eu, service.name=other",
	})
	c, err := otlp.New(otlp.Config{URL: "https://" + oc.Addr + "/v1/logs", Signal: "logs", Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Export(context.Background(), request(t, "hello", map[string]string{"service.name": "guard"}, getenv)); err != nil {
		t.Fatal(err)
	}
	oc.WaitRecords(1)
	got := oc.Received()[0]
	if got.Body.StringValue != "hello" || got.Resource["service.name"] != "guard" || got.Resource["deployment.environment"] != "prod eu" {
		t.Errorf("received %q from %v", got.Body.StringValue, got.Resource)
	}
}

// The collector refuses what is not an export request: the error has its
// status and reason. A receiver that cannot be reached is another error.
func TestExportRefused(t *testing.T) {
	oc := streamtest.NewOtelcol(t, nil)
	c, err := otlp.New(otlp.Config{URL: "http://" + oc.Addr + "/v1/logs", Signal: "logs", Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Export(context.Background(), []byte("\xffnot an export request"))
	var se *otlp.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusBadRequest || se.Reason == "" {
		t.Fatalf("got %v, want a 400 with a reason", err)
	}
	t.Logf("the collector answered: %v", err)
	oc.Stop()
	err = c.Export(context.Background(), request(t, "hello", nil, env(nil)))
	if err == nil || errors.As(err, &se) {
		t.Fatalf("the collector stopped: got %v, want the connection's error", err)
	}
}

// partialAnswer is an export response (ExportLogsServiceResponse) with a
// partial success.
func partialAnswer(rejected int64, msg string) []byte {
	var ps []byte
	if rejected != 0 {
		ps = protowire.AppendTag(ps, 1, protowire.VarintType)
		ps = protowire.AppendVarint(ps, uint64(rejected))
	}
	if msg != "" {
		ps = protowire.AppendTag(ps, 2, protowire.BytesType)
		ps = protowire.AppendString(ps, msg)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, ps)
}

// A receiver's answers, as the client reads them. A receiver that answers
// a partial success is not at hand (the collector takes all or nothing),
// so a test server answers.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		answer      []byte
		want        error
	}{
		{"success, no answer", 200, "", nil, nil},
		{"success, an empty response", 200, "application/x-protobuf", nil, nil},
		{"partial success", 200, "application/x-protobuf", partialAnswer(3, "too old"), &otlp.PartialError{Rejected: 3, Message: "too old"}},
		{"a warning", 200, "application/x-protobuf", partialAnswer(0, "deprecated field"), &otlp.PartialError{Message: "deprecated field"}},
		{"a partial success that rejects nothing", 200, "application/x-protobuf", partialAnswer(0, ""), nil},
		{"an answer in JSON", 200, "application/json", []byte(`{"partialSuccess":{"rejectedLogRecords":"3"}}`), nil},
		{"an answer it cannot read", 202, "application/x-protobuf", []byte{0xff, 0xff}, nil},
		{"overloaded", 503, "text/plain", []byte("overloaded\n"), &otlp.StatusError{Code: 503, Status: "503 Service Unavailable", Reason: "overloaded"}},
		{"a google.rpc.Status", 400, "application/x-protobuf; charset=binary",
			protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "bad request"),
			&otlp.StatusError{Code: 400, Status: "400 Bad Request", Reason: "bad request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write(tc.answer)
			}))
			defer srv.Close()
			c, err := otlp.New(otlp.Config{URL: srv.URL + "/v1/logs", Signal: "logs", Getenv: env(nil)})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Export(context.Background(), request(t, "hello", nil, env(nil)))
			switch want := tc.want.(type) {
			case nil:
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
			case *otlp.PartialError:
				var got *otlp.PartialError
				if !errors.As(err, &got) || *got != *want {
					t.Fatalf("got %v, want %v", err, want)
				}
			case *otlp.StatusError:
				var got *otlp.StatusError
				if !errors.As(err, &got) || *got != *want {
					t.Fatalf("got %v, want %v", err, want)
				}
			}
		})
	}
}

// The headers OTEL_EXPORTER_OTLP_LOGS_HEADERS lists (in place of the
// general ones) arrive with each request, and the client shows the
// certificate the variables name to a receiver that asks for one. The
// configuration's CA comes before the variable's.
func TestHeadersAndClientCertificate(t *testing.T) {
	certs := streamtest.NewCerts(t)
	pair, err := tls.LoadX509KeyPair(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *http.Request, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: certs.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()
	c, err := otlp.New(otlp.Config{URL: srv.URL + "/v1/logs", Signal: "logs", RootCAs: certs.Pool, Getenv: env(map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":            "x-general=1",
		"OTEL_EXPORTER_OTLP_LOGS_HEADERS":       "api-key=a%2Cb%3D, x-tenant = acme ,",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":        filepath.Join(t.TempDir(), "absent.pem"),
		"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": certs.CertFile,
		"OTEL_EXPORTER_OTLP_CLIENT_KEY":         certs.KeyFile,
	})})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Export(context.Background(), request(t, "hello", nil, env(nil))); err != nil {
		t.Fatal(err)
	}
	r := <-got
	for k, want := range map[string]string{"Api-Key": "a,b=", "X-Tenant": "acme", "X-General": "",
		"Content-Type": "application/x-protobuf", "User-Agent": "guard", "Content-Encoding": ""} {
		if r.Header.Get(k) != want {
			t.Errorf("%s: %q, want %q", k, r.Header.Get(k), want)
		}
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/logs" {
		t.Errorf("%s %s", r.Method, r.URL.Path)
	}
	if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "127.0.0.1" {
		t.Errorf("client certificate %v", r.TLS.PeerCertificates)
	}
}

// Variables that cannot be used are errors of New, or of Resource; no
// error shows a header's value, which may be a credential.
func TestBadVariables(t *testing.T) {
	certs := streamtest.NewCerts(t)
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "Authorization Bearer s3cret"}, "OTEL_EXPORTER_OTLP_HEADERS: item 1 is not key=value"},
		{map[string]string{"OTEL_EXPORTER_OTLP_LOGS_HEADERS": "a=1,bad key=s3cret"}, `OTEL_EXPORTER_OTLP_LOGS_HEADERS: "bad key" is not a header name`},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "k=s3cret%zz"}, "the value of k is not percent-encoded"},
		{map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, `OTEL_EXPORTER_OTLP_COMPRESSION="zstd": want gzip or none`},
		{map[string]string{"OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE": certs.KeyFile}, "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE: no PEM certificate in"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/absent/ca.pem"}, "OTEL_EXPORTER_OTLP_CERTIFICATE: open /absent/ca.pem"},
		{map[string]string{"OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE": certs.CertFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY": certs.KeyFile},
			"OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY go together"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": certs.CertFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY": certs.CertFile},
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY: tls:"},
	} {
		_, err := otlp.New(otlp.Config{URL: "https://127.0.0.1:4318/v1/logs", Signal: "logs", Getenv: env(tc.vars)})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: got %v, want %q", tc.vars, err, tc.want)
		}
	}
	if _, err := otlp.Resource(env(map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=1,b"}), nil); err == nil ||
		!strings.Contains(err.Error(), "OTEL_RESOURCE_ATTRIBUTES: item 2 is not key=value") {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES=a=1,b: %v", err)
	}
	// Over plain HTTP, TLS variables are not read.
	if _, err := otlp.New(otlp.Config{URL: "http://127.0.0.1:4318/v1/logs", Signal: "logs",
		Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/absent/ca.pem"})}); err != nil {
		t.Errorf("http: %v", err)
	}
}

// A resource's attributes are in the order of their keys; the caller's
// win over OTEL_SERVICE_NAME's, which wins over OTEL_RESOURCE_ATTRIBUTES'.
func TestResource(t *testing.T) {
	for _, tc := range []struct {
		vars  map[string]string
		attrs map[string]string
		want  string
	}{
		{nil, map[string]string{"service.name": "guard", "host.name": "h"}, "host.name=h service.name=guard"},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=a,zone=eu%2D1", "OTEL_SERVICE_NAME": "b"}, nil, "service.name=b zone=eu-1"},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=a", "OTEL_SERVICE_NAME": "b"}, map[string]string{"service.name": "guard"}, "service.name=guard"},
	} {
		res, err := otlp.Resource(env(tc.vars), tc.attrs)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range res.Attributes {
			got = append(got, kv.Key+"="+kv.Value.GetStringValue())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%v %v: %q, want %q", tc.vars, tc.attrs, got, tc.want)
		}
	}
}

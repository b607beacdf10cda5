package otlp

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"golang.org/x/net/http/httpguts"
)

// envReader reads the OTEL_EXPORTER_OTLP_* variables of one signal.
type envReader struct {
	getenv func(string) string
	signal string // upper case: LOGS
}

// prefixes are the variables' prefixes, in order of precedence.
func (e envReader) prefixes() []string {
	if e.signal == "" {
		return []string{"OTEL_EXPORTER_OTLP_"}
	}
	return []string{"OTEL_EXPORTER_OTLP_" + e.signal + "_", "OTEL_EXPORTER_OTLP_"}
}

// get returns the value of OTEL_EXPORTER_OTLP_SIGNAL_KEY, else of
// OTEL_EXPORTER_OTLP_KEY, and the name of the variable read.
func (e envReader) get(key string) (value, name string) {
	for _, p := range e.prefixes() {
		name = p + key
		if value = strings.TrimSpace(e.getenv(name)); value != "" {
			break
		}
	}
	return value, name
}

// headers are the headers OTEL_EXPORTER_OTLP_HEADERS adds to requests.
func (e envReader) headers() (http.Header, error) {
	h := http.Header{}
	v, name := e.get("HEADERS")
	kvs, err := pairs(name, v)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		if !httpguts.ValidHeaderFieldName(kv[0]) {
			return nil, fmt.Errorf("otlp: %s: %q is not a header name", name, kv[0])
		}
		h.Set(kv[0], kv[1])
	}
	return h, nil
}

// tls is the TLS configuration for an https receiver: roots, else the
// certificates OTEL_EXPORTER_OTLP_CERTIFICATE names, else the system's;
// and the client certificate OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and
// _CLIENT_KEY name, if any.
func (e envReader) tls(roots *x509.CertPool) (*tls.Config, error) {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if path, name := e.get("CERTIFICATE"); roots == nil && path != "" {
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("otlp: %s: %w", name, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("otlp: %s: no PEM certificate in %s", name, path)
		}
	}
	// The pair of the signal's variables, else the pair of the general
	// ones: a certificate and a key of different pairs do not go together.
	for _, p := range e.prefixes() {
		certName, keyName := p+"CLIENT_CERTIFICATE", p+"CLIENT_KEY"
		cert, key := strings.TrimSpace(e.getenv(certName)), strings.TrimSpace(e.getenv(keyName))
		if cert == "" && key == "" {
			continue
		}
		if cert == "" || key == "" {
			return nil, fmt.Errorf("otlp: %s and %s go together", certName, keyName)
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("otlp: %s and %s: %w", certName, keyName, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		break
	}
	return cfg, nil
}

// Resource returns the resource of attrs, and of the attributes
// OTEL_RESOURCE_ATTRIBUTES lists (key=value,key=value, values
// percent-encoded) and OTEL_SERVICE_NAME's service.name where attrs do not
// name the same key, in the order of their keys, as the SDK merges them.
// getenv reads the environment (nil: os.Getenv).
func Resource(getenv func(string) string, attrs map[string]string) (*resourcepb.Resource, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	all := map[string]string{}
	kvs, err := pairs("OTEL_RESOURCE_ATTRIBUTES", getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		all[kv[0]] = kv[1]
	}
	if v := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); v != "" {
		all["service.name"] = v
	}
	for k, v := range attrs {
		all[k] = v
	}
	res := &resourcepb.Resource{}
	for k, v := range all {
		res.Attributes = append(res.Attributes, String(k, v))
	}
	slices.SortFunc(res.Attributes, func(a, b *commonpb.KeyValue) int { return cmp.Compare(a.Key, b.Key) })
	return res, nil
}

// String is an attribute whose value is a string.
func String(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: StringValue(v)}
}

// StringValue is a string as a value (of an attribute, a log's body).
func StringValue(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

// pairs parses a variable's list, key=value,key=value with
// percent-encoded values (the W3C Baggage format the OTEL_* variables
// use, without properties).
func pairs(name, s string) ([][2]string, error) {
	var out [][2]string
	// The errors name an item by its place, not its text: a header's
	// value may be a credential.
	for i, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("otlp: %s: item %d is not key=value", name, i+1)
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("otlp: %s: the value of %s is not percent-encoded", name, k)
		}
		out = append(out, [2]string{k, val})
	}
	return out, nil
}

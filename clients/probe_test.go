package clients

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The probe tells a server that asks for OAuth (401 and metadata that
// names how) from one that does not, or that cannot be reached.
func TestProbeOAuth(t *testing.T) {
	mux := http.NewServeMux()
	// 2025-06-18 and later: WWW-Authenticate names the metadata.
	mux.HandleFunc("/header/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://`+r.Host+`/.well-known/oauth-protected-resource/header/mcp"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	// The metadata at its well-known address only.
	mux.HandleFunc("/wellknown/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	})
	mux.HandleFunc("/.well-known/oauth-protected-resource/wellknown/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"resource":"http://` + r.Host + `/wellknown/mcp","authorization_servers":["https://login.example.com"]}`))
	})
	// A key the entry does not have: 401 without OAuth.
	mux.HandleFunc("/key/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") == "k" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	// An SSE server that asks for OAuth on its event stream.
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://`+r.Host+`/.well-known/oauth-protected-resource"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	mux.HandleFunc("/open/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":0,"result":{}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	// A port nobody listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + l.Addr().String() + "/mcp"
	l.Close()
	for _, tc := range []struct {
		url     string
		sse     bool
		headers map[string]string
		want    bool
	}{
		{srv.URL + "/header/mcp", false, nil, true},
		{srv.URL + "/wellknown/mcp", false, nil, true},
		{srv.URL + "/key/mcp", false, nil, false},
		{srv.URL + "/key/mcp", false, map[string]string{"X-Api-Key": "k"}, false},
		{srv.URL + "/sse", true, nil, true},
		{srv.URL + "/open/mcp", false, nil, false},
		{closed, false, nil, false},
		{"not a url", false, nil, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if got := ProbeOAuth(ctx, nil, tc.url, tc.sse, tc.headers); got != tc.want {
			t.Errorf("%s (sse %v, headers %v): %v, want %v", tc.url, tc.sse, tc.headers, got, tc.want)
		}
		cancel()
	}
}

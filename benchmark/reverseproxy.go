package benchmark

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// ReverseProxyCommand is the guard-bench command that runs ReverseProxy:
// guard-bench bench-reverse-proxy LISTEN UPSTREAM.
const ReverseProxyCommand = "bench-reverse-proxy"

// ReverseProxy serves on listen a reverse proxy to upstream made of Go's
// httputil.ReverseProxy, with kept-alive connections to the upstream and
// every response written through as it comes (an SSE stream included),
// until ctx ends. It is the least an HTTP proxy does, the floor that
// guard-bench measures guard serve with an HTTP upstream against.
func ReverseProxy(ctx context.Context, listen, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("reverse proxy: upstream %q: want an http:// URL", upstream)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.URL.Path = u.Path // one endpoint: the upstream's
			r.Out.Host = u.Host
		},
		// Streamable HTTP answers with SSE streams: each event goes on
		// as it is written.
		FlushInterval: -1,
		Transport: &http.Transport{
			// As many kept-alive connections as clients: none is
			// opened per request.
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("reverse proxy: %w", err)
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("reverse proxy: %w", err)
	}
	return nil
}

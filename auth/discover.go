package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
)

// ServerMetadata is what guard reads of the identity provider's metadata
// (OpenID Connect Discovery, or RFC 8414 for a plain OAuth server).
type ServerMetadata struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	TokenEndpoint         string `json:"token_endpoint"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
}

// Discover reads the identity provider's metadata now (else the first
// token does), and returns it.
func (v *Verifier) Discover(ctx context.Context) (*ServerMetadata, error) {
	if _, err := v.keySet(ctx); err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	m := *v.server
	return &m, nil
}

// keySet returns the issuer's keys, discovering them first. A discovery
// that failed is not tried again for a few seconds: meanwhile tokens are
// refused with 503 at once, rather than each waiting on the provider.
func (v *Verifier) keySet(ctx context.Context) (*keySet, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys != nil {
		return v.keys, nil
	}
	if !v.failed.IsZero() && v.cfg.Now().Sub(v.failed) < rediscoverAfter {
		return nil, unavailable("the identity provider's metadata could not be read: %v", v.failErr)
	}
	m, err := discover(oidc.ClientContext(ctx, v.cfg.Client), v.cfg.Client, v.cfg.Issuer)
	if err != nil {
		v.failed, v.failErr = v.cfg.Now(), err
		v.cfg.Logger.Warn("the identity provider's metadata could not be read", "issuer", v.cfg.Issuer, "err", err)
		return nil, unavailable("the identity provider's metadata could not be read: %v", err)
	}
	if m.JWKSURI == "" {
		err := fmt.Errorf("the metadata of %s names no jwks_uri", v.cfg.Issuer)
		v.failed, v.failErr = v.cfg.Now(), err
		return nil, unavailable("%v", err)
	}
	v.server = m
	v.keys = newKeySet(m.JWKSURI, v.cfg.Client, v.cfg.Now, v.cfg.Logger)
	return v.keys, nil
}

// metadata returns the provider's metadata, discovering it first.
func (v *Verifier) metadata(ctx context.Context) (*ServerMetadata, error) {
	if _, err := v.keySet(ctx); err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.server, nil
}

// discover reads an issuer's metadata: OpenID Connect Discovery (go-oidc,
// which checks that the document names the issuer), else RFC 8414's
// oauth-authorization-server document, which must name it too.
func discover(ctx context.Context, client *http.Client, issuer string) (*ServerMetadata, error) {
	p, oidcErr := oidc.NewProvider(ctx, issuer)
	if oidcErr == nil {
		var m ServerMetadata
		if err := p.Claims(&m); err != nil {
			return nil, err
		}
		return &m, nil
	}
	u, err := url.Parse(issuer)
	if err != nil {
		return nil, err
	}
	wellKnown := u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, wellKnown, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, oidcErr
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, oidcErr // OpenID Connect's answer is the more telling
	}
	var m ServerMetadata
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", wellKnown, err)
	}
	if m.Issuer != issuer {
		return nil, fmt.Errorf("%s names the issuer %q, not %q", wellKnown, m.Issuer, issuer)
	}
	return &m, nil
}

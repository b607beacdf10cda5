package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Token exchange (RFC 8693) names.
const (
	grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	tokenTypeAccess    = "urn:ietf:params:oauth:token-type:access_token"
)

// Exchanger trades the caller's access token for one meant for an upstream
// server (RFC 8693 token exchange at the identity provider), so that the
// upstream server sees the same person without ever seeing the token guard
// received. Each subject's token is kept until shortly before it expires.
type Exchanger struct {
	// TokenURL is the identity provider's token endpoint; when "", the
	// token_endpoint of Verifier's metadata.
	TokenURL string
	Verifier *Verifier
	// ClientID and ClientSecret authenticate guard at the token endpoint
	// (HTTP Basic).
	ClientID     string
	ClientSecret string
	// Audience and Scope are what the new token is asked for.
	Audience string
	Scope    string
	// Resource, when set, is asked for too (RFC 8707).
	Resource string
	Client   *http.Client
	Now      func() time.Time

	mu    sync.Mutex
	cache map[string]exchanged // by subject
}

type exchanged struct {
	token string
	until time.Time
}

// renewBefore is how long before its expiry an exchanged token is
// replaced: a request must not reach the upstream with a token about to
// lapse.
const renewBefore = 30 * time.Second

// ErrNoSubjectToken refuses an exchange for a caller that did not
// authenticate with an access token (a static token's client).
var ErrNoSubjectToken = errors.New("token exchange: the caller did not authenticate with an access token, so there is none to exchange")

// Token returns an access token for the upstream server on behalf of
// subject, whose own access token is subjectToken: one kept from an earlier
// exchange while it lasts, else a new one.
func (x *Exchanger) Token(ctx context.Context, subject, subjectToken string) (string, error) {
	if subject == "" || subjectToken == "" {
		return "", ErrNoSubjectToken
	}
	now := x.now()
	x.mu.Lock()
	if e, ok := x.cache[subject]; ok && now.Before(e.until) {
		x.mu.Unlock()
		return e.token, nil
	}
	x.mu.Unlock()
	tok, lifetime, err := x.exchange(ctx, subjectToken)
	if err != nil {
		return "", err
	}
	until := now.Add(lifetime - renewBefore)
	if lifetime <= renewBefore {
		until = now // used for this request only
	}
	x.mu.Lock()
	if x.cache == nil {
		x.cache = map[string]exchanged{}
	}
	if len(x.cache) >= keepAtMost {
		clear(x.cache)
	}
	x.cache[subject] = exchanged{token: tok, until: until}
	x.mu.Unlock()
	return tok, nil
}

func (x *Exchanger) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

// exchange asks the token endpoint for a new token.
func (x *Exchanger) exchange(ctx context.Context, subjectToken string) (string, time.Duration, error) {
	endpoint := x.TokenURL
	if endpoint == "" {
		if x.Verifier == nil {
			return "", 0, errors.New("token exchange: no token_url, and no issuer to read one from")
		}
		m, err := x.Verifier.metadata(ctx)
		if err != nil {
			return "", 0, fmt.Errorf("token exchange: %w", err)
		}
		if endpoint = m.TokenEndpoint; endpoint == "" {
			return "", 0, errors.New("token exchange: the identity provider's metadata names no token_endpoint")
		}
	}
	form := url.Values{
		"grant_type":           {grantTokenExchange},
		"subject_token":        {subjectToken},
		"subject_token_type":   {tokenTypeAccess},
		"requested_token_type": {tokenTypeAccess},
	}
	if x.Audience != "" {
		form.Set("audience", x.Audience)
	}
	if x.Scope != "" {
		form.Set("scope", x.Scope)
	}
	if x.Resource != "" {
		form.Set("resource", x.Resource)
	}
	client := x.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	status, body, err := postAsClient(ctx, client, endpoint, form, x.ClientID, x.ClientSecret)
	if err != nil {
		return "", 0, fmt.Errorf("token exchange: %w", err)
	}
	var out struct {
		AccessToken      string      `json:"access_token"`
		ExpiresIn        json.Number `json:"expires_in"`
		Error            string      `json:"error"`
		ErrorDescription string      `json:"error_description"`
	}
	_ = json.Unmarshal(body, &out)
	if status != http.StatusOK || out.AccessToken == "" {
		why := strings.TrimSpace(out.Error + " " + out.ErrorDescription)
		if why == "" {
			why = strings.TrimSpace(string(body))
		}
		return "", 0, fmt.Errorf("token exchange: the identity provider answered HTTP %d: %s", status, why)
	}
	lifetime := 5 * time.Minute // when the answer does not say
	if n, err := out.ExpiresIn.Int64(); err == nil && n > 0 {
		lifetime = time.Duration(n) * time.Second
	}
	return out.AccessToken, lifetime, nil
}

// postAsClient posts a form to an endpoint of the identity provider as
// guard's own client (HTTP Basic, RFC 6749 section 2.3.1) and returns the
// answer's status and body (at most 1 MiB).
func postAsClient(ctx context.Context, client *http.Client, endpoint string, form url.Values, id, secret string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, body, nil
}

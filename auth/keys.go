package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// refetchEvery is how often, at most, a token signed with a key guard does
// not hold makes it read the issuer's key set again. A provider that
// rotates its keys publishes the new one, and a token signed with it makes
// guard read the set once; a stream of tokens naming made-up key ids must
// not become a stream of requests to the provider. The price: a token
// signed with a key published less than this long after guard last read
// the set is refused until then.
const refetchEvery = time.Minute

// maxKeySet bounds the key set document read.
const maxKeySet = 1 << 20

// errKeyUnknown is a token signed with a key the issuer's set, as last
// read, does not hold.
var errKeyUnknown = errors.New("no key of the issuer's verifies the token")

// keySet is the issuer's published keys (its JWKS): read when a token
// first needs them, and again when a token is signed with a key they do
// not hold, at most once per refetchEvery. Requests that need the set
// while it is being read wait for that one read.
type keySet struct {
	uri    string
	client *http.Client
	now    func() time.Time
	logger *slog.Logger

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	read    bool      // keys were read once
	last    time.Time // the last read, whatever came of it
	lastErr error     // its error, nil when it succeeded
	reading chan struct{}
}

func newKeySet(uri string, client *http.Client, now func() time.Time, logger *slog.Logger) *keySet {
	return &keySet{uri: uri, client: client, now: now, logger: logger}
}

// verify checks a JWT's signature with the issuer's keys and returns its
// payload. A token that no key verifies is errKeyUnknown; a key set that
// cannot be read is an *Error (503).
func (k *keySet) verify(ctx context.Context, jws *jose.JSONWebSignature) ([]byte, error) {
	kid := jws.Signatures[0].Header.KeyID
	keys, err := k.current(ctx, false)
	if err != nil {
		return nil, err
	}
	payload, known := verifyWith(jws, kid, keys)
	if payload != nil {
		return payload, nil
	}
	if known {
		// The key it names is there and does not verify it: reading the
		// set again would not change that.
		return nil, errKeyUnknown
	}
	if keys, err = k.current(ctx, true); err != nil {
		return nil, err
	}
	if payload, _ = verifyWith(jws, kid, keys); payload != nil {
		return payload, nil
	}
	return nil, errKeyUnknown
}

// verifyWith tries the keys a token's key id names (every key when it
// names none). known reports whether one of them has that id.
func verifyWith(jws *jose.JSONWebSignature, kid string, keys []jose.JSONWebKey) (payload []byte, known bool) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		known = kid != ""
		if p, err := jws.Verify(&keys[i]); err == nil {
			return p, true
		}
	}
	return nil, known
}

// current returns the keys: read the first time, and read again when
// again is set (a token was signed with a key they do not hold) and the
// last read is refetchEvery old. A read that failed is not tried again
// for rediscoverAfter: meanwhile a token that needs one is refused (503)
// at once.
func (k *keySet) current(ctx context.Context, again bool) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	now := k.now()
	reading := k.reading
	if reading == nil {
		switch {
		case k.read && (!again || now.Sub(k.last) < refetchEvery):
			keys := k.keys
			k.mu.Unlock()
			return keys, nil
		case !k.read && k.lastErr != nil && now.Sub(k.last) < rediscoverAfter:
			err := k.lastErr
			k.mu.Unlock()
			return nil, unavailable("the identity provider's keys could not be read: %v", err)
		}
		reading = make(chan struct{})
		k.reading, k.last = reading, now
		go k.fetch(reading)
	}
	k.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, unavailable("the identity provider's keys were not read in time: %v", ctx.Err())
	case <-reading:
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lastErr != nil && !k.read {
		return nil, unavailable("the identity provider's keys could not be read: %v", k.lastErr)
	}
	// A read that failed leaves the keys read before: a token whose key
	// is among them still verifies.
	return k.keys, nil
}

// fetch reads the key set, for every request waiting on done: with a
// context of its own, so that the request that started it going away
// does not fail the others.
func (k *keySet) fetch(done chan struct{}) {
	timeout := k.client.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	keys, err := k.get(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lastErr, k.reading = err, nil
	if err == nil {
		k.keys, k.read = keys, true
	} else {
		k.logger.Warn("the identity provider's keys could not be read", "jwks_uri", k.uri, "err", err)
	}
	close(done)
}

// get reads the key set document: the keys of the algorithms guard
// accepts, public halves only.
func (k *keySet) get(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.uri, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySet))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.uri, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered HTTP %d", k.uri, resp.StatusCode)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a key set: %w", k.uri, err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var key jose.JSONWebKey
		// A key of a type or algorithm guard does not accept (a
		// shared secret among them) is left out, not an error: the
		// set may hold others for other uses.
		if err := key.UnmarshalJSON(raw); err != nil {
			continue
		}
		pub := key.Public()
		if !pub.Valid() || key.Algorithm != "" && !slices.Contains(algorithms, jose.SignatureAlgorithm(key.Algorithm)) {
			continue
		}
		keys = append(keys, pub)
	}
	return keys, nil
}

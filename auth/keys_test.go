package auth_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/auth/oidctest"
)

// Tokens signed with keys the issuer does not publish make guard read the
// issuer's key set again at most once a minute, however many come, with
// whatever key ids, one after another or at once; a key the provider
// rotated to is read once that minute has passed, and the keys before it
// still verify their tokens.
func TestUnknownKeysRefetchTheKeySetOnceAMinute(t *testing.T) {
	p := provider(t, oidctest.Options{})
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	v, err := auth.New(auth.Config{Issuer: p.Issuer, Audience: audience, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := oidctest.Mint{Subject: "alice", Audience: []string{audience}}
	before := p.Mint(t, good)
	if _, err := v.Verify(ctx, before, ""); err != nil {
		t.Fatal(err)
	}
	fetches := func(want int, when string) {
		t.Helper()
		if got := p.KeyFetches(); got != want {
			t.Fatalf("%s: the key set was read %d times, want %d", when, got, want)
		}
	}
	fetches(1, "the first token")
	unknown := func(kid string) {
		t.Helper()
		m := good
		m.KeyID = kid
		_, err := v.Verify(ctx, p.Mint(t, m), "")
		refusal(t, err, 401, "invalid_token", "the token's signature does not verify with the issuer's keys")
	}
	for i := range 100 {
		unknown(fmt.Sprintf("made-up-%d", i))
	}
	for range 20 {
		unknown("the-same-made-up-key")
	}
	fetches(1, "120 tokens with unknown keys within the minute of the first read")

	advance(refetchEvery())
	var wg sync.WaitGroup
	for i := range 50 {
		m := good
		m.KeyID = fmt.Sprintf("at-once-%d", i)
		token := p.Mint(t, m)
		wg.Go(func() {
			if _, err := v.Verify(ctx, token, ""); err == nil {
				t.Error("a token of an unknown key verified")
			}
		})
	}
	wg.Wait()
	fetches(2, "50 tokens with unknown keys at once, a minute later")

	// The provider rotates its key: a token signed with the new one is
	// refused until a minute after the last read, then read once.
	if err := p.Rotate(); err != nil {
		t.Fatal(err)
	}
	rotated := p.Mint(t, good)
	_, err = v.Verify(ctx, rotated, "")
	refusal(t, err, 401, "invalid_token", "does not verify")
	advance(refetchEvery())
	for range 10 {
		if _, err := v.Verify(ctx, rotated, ""); err != nil {
			t.Fatalf("the rotated key's token, a minute later: %v", err)
		}
	}
	if _, err := v.Verify(ctx, before, ""); err != nil {
		t.Fatalf("a token of the key before: %v", err)
	}
	fetches(3, "the rotated key")
}

// refetchEvery is how long the test waits for guard to read the key set
// again: a minute, and a moment.
func refetchEvery() time.Duration { return time.Minute + time.Second }

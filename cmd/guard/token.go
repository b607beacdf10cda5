package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/guard-mcp/guard/config"
	"github.com/spf13/cobra"
)

func init() { register(tokenCommand) }

// tokenCommand makes a bearer token for a client of guard serve, and the
// line of configuration that admits it.
func tokenCommand(a *app) *cobra.Command {
	c := leaf("token NAME", "make a bearer token for a client of guard serve", exactly("NAME"))
	c.RunE = a.runs(func(_ context.Context, args []string) int {
		buf := make([]byte, 32)
		if _, err := rand.Read(buf); err != nil {
			fmt.Fprintf(a.stderr, "guard token: %v\n", err)
			return exitFailure
		}
		tok := hex.EncodeToString(buf)
		sum := sha256.Sum256([]byte(tok))
		fmt.Fprintf(a.stdout, "token for %s (give it to the client; guard keeps only its hash):\n  %s\n\n", args[0], tok)
		fmt.Fprintf(a.stdout, "add to guard's configuration:\nclients:\n  - {name: %s, token_sha256: %s}\n", args[0], hex.EncodeToString(sum[:]))
		return exitOK
	})
	return c
}

// bearerAuth names the client of a request by its bearer token, compared
// by hash in constant time against every configured client.
func bearerAuth(clients []config.Client) func(r *http.Request) (string, bool) {
	type entry struct {
		name string
		sum  []byte
	}
	entries := make([]entry, 0, len(clients))
	for _, c := range clients {
		b, _ := hex.DecodeString(c.TokenSHA256)
		entries = append(entries, entry{c.Name, b})
	}
	return func(r *http.Request) (string, bool) {
		h := r.Header.Get("Authorization")
		if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") {
			return "", false
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(h[7:])))
		name, ok := "", false
		for _, e := range entries {
			if subtle.ConstantTimeCompare(sum[:], e.sum) == 1 {
				name, ok = e.name, true
			}
		}
		return name, ok
	}
}

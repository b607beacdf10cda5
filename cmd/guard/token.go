package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

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

package app

import (
	"testing"

	guard "github.com/guard-mcp/guard"
)

func TestDuplicateTools(t *testing.T) {
	got := duplicateTools([]guard.Tool{{Server: "a", Name: "search"}, {Server: "b", Name: "search"}, {Server: "a", Name: "read"}})
	if len(got) != 1 || len(got["search"]) != 2 {
		t.Fatalf("%v", got)
	}
}

// policy test names the rate limits a call would also count against, by
// the same matching the relay uses, and only those.

package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/policy/scan"
	"github.com/guard-mcp/guard/store"
)

// toolScanner scans a server's tool definitions for instructions aimed at
// the model, including mentions of the tools of the other servers this
// database knows.
func toolScanner(ctx context.Context, db *store.DB, logger *slog.Logger) func(server string, def []byte) []guard.Flag {
	var mu sync.Mutex
	var known []guard.Tool
	var read time.Time
	// The catalog is read at most every 5 s (once for a whole listing);
	// one scanner serves every server of the process.
	otherTools := func(server string) []string {
		mu.Lock()
		if time.Since(read) >= 5*time.Second {
			if tools, err := db.Catalog().Tools(ctx, ""); err == nil {
				known, read = tools, time.Now()
			}
		}
		tools := known
		mu.Unlock()
		var others []string
		for _, t := range tools {
			if t.Server != server {
				others = append(others, t.Name, t.Server+"__"+t.Name)
			}
		}
		return others
	}
	return func(server string, def []byte) []guard.Flag {
		others := otherTools(server)
		flags, err := scan.Definition(def, scan.Options{OtherTools: others})
		if err != nil {
			logger.Warn("tool definition not scanned", "err", err)
			return []guard.Flag{{Kind: "unreadable", Where: "definition", Evidence: err.Error()}}
		}
		out := make([]guard.Flag, len(flags))
		for i, f := range flags {
			out[i] = guard.Flag{Kind: f.Kind, Where: f.Where, Evidence: f.Evidence}
		}
		return out
	}
}

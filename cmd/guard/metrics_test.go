package main

import (
	"net/http/httptest"
	"testing"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/guard-mcp/guard/store"
)

// scrapeMetrics is what a scraper of a serving process on db reads of
// its database's figures, in the text format.
func scrapeMetrics(t *testing.T, db *store.DB) string {
	t.Helper()
	rec := httptest.NewRecorder()
	(&guardapp.Main{Version: "test"}).NewMetrics(db).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

package web

import (
	"context"
	"strings"
	"testing"
)

// The Pending page says which receivers of the announcements of new
// holds are failing, escaped as any text, and nothing when none is; each
// card carries the id an announcement's link points to.
func TestPendingPageSaysWhichAnnouncementsFail(t *testing.T) {
	render := func(v pendingView) string {
		var b strings.Builder
		if err := pendingPage(v).Render(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	page := render(pendingView{Undelivered: []string{"json https://ops.example.com 3e14cc: failing, retrying (<no answer>)"},
		Cards: []cardView{{ID: "01a2"}}})
	if !strings.Contains(page, `id="notify-failing"`) || !strings.Contains(page, "json https://ops.example.com 3e14cc: failing, retrying (&lt;no answer&gt;)") ||
		!strings.Contains(page, `id="approval-01a2"`) {
		t.Fatalf("page:\n%s", page)
	}
	if page := render(pendingView{}); strings.Contains(page, "notify-failing") {
		t.Fatalf("a line with nothing failing:\n%s", page)
	}
}

package config

import (
	"strings"
	"testing"

	"github.com/guard-mcp/guard/notify"
)

func TestNotifyConfig(t *testing.T) {
	env := map[string]string{"HOOK_SECRET": "s3cret-hmac-key", "SLACK_HOOK": "https://hooks.slack.com/services/T0/B0/XyZsecret"}
	cfg := "notify:\n" +
		"  - {webhook: \"${SLACK_HOOK}\", format: slack}\n" +
		"  - {webhook: https://ops.example.com/guard, secret: \"${HOOK_SECRET}\"}\n" +
		"  - {webhook: \"http://127.0.0.1:9000/hook\", secret: x}\n"
	c, err := parse([]byte(cfg), "cfg.yaml", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := []notify.Config{
		{Webhook: env["SLACK_HOOK"], Format: notify.FormatSlack},
		{Webhook: "https://ops.example.com/guard", Format: notify.FormatJSON, Secret: "s3cret-hmac-key"},
		{Webhook: "http://127.0.0.1:9000/hook", Format: notify.FormatJSON, Secret: "x"},
	}
	if len(c.Notify) != len(want) {
		t.Fatalf("got %+v", c.Notify)
	}
	for i := range want {
		if c.Notify[i] != want[i] {
			t.Errorf("receiver %d: got %+v, want %+v", i, c.Notify[i], want[i])
		}
	}
	// The expanded values are guard's own secrets, masked wherever they
	// appear; the labels shown in logs and metrics hold neither.
	if c.Expanded["HOOK_SECRET"] != env["HOOK_SECRET"] || c.Expanded["SLACK_HOOK"] != env["SLACK_HOOK"] {
		t.Errorf("expanded: %v", c.Expanded)
	}
	for _, n := range c.Notify {
		if l := n.Label(); strings.Contains(l, "XyZsecret") || strings.Contains(l, "/services") || strings.Contains(l, "/guard") || strings.Contains(l, ":9000/") {
			t.Errorf("label %q shows the webhook's path", l)
		}
	}
	if a, b := c.Notify[1].Label(), (notify.Config{Webhook: "https://ops.example.com/other", Format: notify.FormatJSON}).Label(); a == b {
		t.Errorf("two webhooks of one host share the label %q", a)
	}
}

func TestNotifyConfigErrors(t *testing.T) {
	wantParseErrors(t, []parseError{
		{"notify: {webhook: https://h/x}\n", 1, "expected a list"},
		{"notify:\n  - {format: slack}\n", 2, "needs a webhook"},
		{"notify:\n  -\n", 2, "needs a webhook"},
		{"notify:\n  - {webhook: ftp://h/x, secret: s}\n", 2, "use an https:// URL"},
		{"notify:\n  - {webhook: /hook, secret: s}\n", 2, "use an https:// URL"},
		{"notify:\n  - {webhook: \"https://u:p@h/x\", secret: s}\n", 2, "use an https:// URL"},
		{"notify:\n  - {webhook: http://ops.example.com/guard, secret: s}\n", 2, "plain http is for a loopback host only"},
		{"notify:\n  - {webhook: https://ops.example.com/guard}\n", 2, "give a secret"},
		{"notify:\n  - {webhook: https://hooks.slack.com/services/T/B/K, format: slack, secret: s}\n", 2, "leave the secret out"},
		{"notify:\n  - {webhook: https://h/x, format: teams}\n", 2, `"teams" is not one of json, slack`},
		{"notify:\n  - {webhook: https://h/x, secret: s, retries: 3}\n", 2, `unknown key "retries"`},
		{"notify:\n  - {webhook: https://h/x, secret: s}\n  - {webhook: https://h/x, secret: t}\n", 3, "listed twice"},
	})
	// An error shows the webhook's scheme and host, never its path (a
	// Slack webhook's path is its credential).
	_, err := Parse([]byte("notify:\n  - {webhook: http://hooks.example.com/services/T/B/K3yK3y, format: slack}\n"), "cfg.yaml")
	if err == nil || strings.Contains(err.Error(), "K3yK3y") {
		t.Errorf("got %v", err)
	}
}

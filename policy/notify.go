package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Notify is one receiver of the announcements of new holds (notify:): a
// webhook guard posts to, in Slack's incoming-webhook format or in
// guard's own JSON signed with Secret.
type Notify struct {
	// Webhook is the URL posted to. It may be a credential itself (a
	// Slack incoming webhook's path is): logs, metrics and the UI show
	// Label instead.
	Webhook string
	// Format is "slack" or "json" (the default).
	Format string
	// Secret is the key of the HMAC-SHA256 signature of a "json" body.
	Secret string
}

// Notify formats.
const (
	NotifyJSON  = "json"
	NotifySlack = "slack"
)

// Name identifies the receiver's delivery cursor in the database: its
// address and format as configured, so that it stays the same from one
// run to the next.
func (n Notify) Name() string { return "notify " + n.Format + " " + n.Webhook }

// Label names the receiver in logs, metrics and the UI: the scheme and
// host of its address and a digest of the whole, never its path or query
// (a Slack webhook's path is its secret).
func (n Notify) Label() string {
	sum := sha256.Sum256([]byte(n.Webhook))
	host := n.Webhook
	if u, err := url.Parse(n.Webhook); err == nil {
		host = u.Scheme + "://" + u.Host
	}
	return n.Format + " " + host + " " + hex.EncodeToString(sum[:3])
}

// notify reads notify:, a list of receivers. The webhook's address and
// the secret are expanded (${NAME}) and their variables are guard's own
// secrets, masked wherever they appear. Plain http is accepted for a
// loopback host only: the body names the held call and its redacted
// arguments, which must not cross a network in the clear.
func (p *parser) notify(n *yaml.Node, dst *[]Notify) error {
	if n.Kind != yaml.SequenceNode {
		return p.errf(n, "expected a list of receivers, like - {webhook: https://hooks.slack.com/services/..., format: slack}")
	}
	seen := map[string]bool{}
	for _, e := range n.Content {
		r := Notify{Format: NotifyJSON}
		// The secret as written: a variable that is not set in the
		// environment of a command that does not notify (guard approvals,
		// guard audit) does not make the configuration invalid there.
		var secret string
		if err := p.mapping(e, map[string]func(*yaml.Node) error{
			"webhook": func(n *yaml.Node) error { err := p.str(&r.Webhook)(n); r.Webhook = p.expand(r.Webhook); return err },
			"format":  p.enum(&r.Format, NotifyJSON, NotifySlack),
			"secret":  func(n *yaml.Node) error { err := p.str(&secret)(n); r.Secret = p.expand(secret); return err },
		}); err != nil {
			return err
		}
		u, err := url.Parse(r.Webhook)
		shown := webhookShown(r.Webhook)
		switch {
		case r.Webhook == "":
			return p.errf(e, "a receiver needs a webhook: its https:// URL")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil:
			return p.errf(e, "webhook %q: use an https:// URL, like https://ops.example.com/guard", shown)
		case u.Scheme == "http" && !loopbackHost(u.Hostname()):
			return p.errf(e, "webhook %q: plain http is for a loopback host only (the message names the held call); use https://", shown)
		case r.Format == NotifyJSON && strings.TrimSpace(secret) == "":
			return p.errf(e, "webhook %q: the json format is signed: give a secret (secret: ${HOOK_SECRET}) that the receiver checks", shown)
		case r.Format == NotifySlack && secret != "":
			return p.errf(e, "webhook %q: Slack checks no signature: leave the secret out (the webhook's address is its secret)", shown)
		}
		if seen[r.Name()] {
			return p.errf(e, "webhook %q is listed twice", shown)
		}
		seen[r.Name()] = true
		*dst = append(*dst, r)
	}
	return nil
}

// webhookShown is a webhook's address as an error may show it: scheme
// and host, the rest elided (it may be the credential).
func webhookShown(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "…"
	}
	if u.Path == "" && u.RawQuery == "" {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}

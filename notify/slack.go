package notify

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Slack is the body of a message to a Slack incoming webhook: text (the
// notification's and the fallback's), and blocks in Block Kit.
type Slack struct {
	Text   string  `json:"text"`
	Blocks []Block `json:"blocks"`
}

// Block is one Block Kit layout block: header, section, context or
// actions.
type Block struct {
	Type     string    `json:"type"`
	Text     *Text     `json:"text,omitempty"`
	Fields   []Text    `json:"fields,omitempty"`
	Elements []Element `json:"elements,omitempty"`
}

// Text is a Block Kit text object: plain_text or mrkdwn.
type Text struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Element is an element of an actions or context block: a link button,
// or a text.
type Element struct {
	Type     string `json:"type"`
	Text     any    `json:"text"` // a Text for a button, a string for a context's mrkdwn
	URL      string `json:"url,omitempty"`
	ActionID string `json:"action_id,omitempty"`
	Style    string `json:"style,omitempty"`
}

// Block Kit's limits on what guard writes.
const (
	slackHeaderMax = 150
	slackFieldMax  = 2000
	slackTextMax   = 3000
	slackButtonMax = 75
)

// SlackMessage writes the announcement of a hold for a Slack incoming
// webhook. It leaves the arguments out: a channel's messages are kept by
// a third party and read by everyone in it, while the UI that the button
// opens shows the arguments to whoever logs in to decide.
func SlackMessage(h *Hold) *Slack {
	who := h.Client
	if h.User != "" {
		who = h.User
		if h.UserEmail != "" && h.UserEmail != h.User {
			who += " (" + h.UserEmail + ")"
		}
		if h.Client != "" {
			who += " with " + h.Client
		}
	}
	title := "Held for approval: " + h.Server + " / " + h.Tool
	why := "Held by rule `" + escape(h.Rule) + "`"
	if h.Reason != "" {
		why += ": " + escape(h.Reason)
	}
	expires := fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|%s>", h.Expires.Unix(), h.Expires.Format("2006-01-02 15:04 MST"))
	fields := []Text{
		{Type: "mrkdwn", Text: "*Server*\n" + escape(h.Server)},
		{Type: "mrkdwn", Text: "*Tool*\n" + escape(h.Tool)},
		{Type: "mrkdwn", Text: "*Called by*\n" + escape(orDash(who))},
		{Type: "mrkdwn", Text: "*Expires*\n" + expires},
	}
	for i := range fields {
		fields[i].Text = cut(fields[i].Text, slackFieldMax)
	}
	return &Slack{
		Text: cut(fmt.Sprintf("%s (by %s) waits for a decision until %s: %s", escape(h.Server+" / "+h.Tool), escape(orDash(who)),
			h.Expires.Format("15:04 MST"), h.URL), slackTextMax),
		Blocks: []Block{
			{Type: "header", Text: &Text{Type: "plain_text", Text: cut(title, slackHeaderMax)}},
			{Type: "section", Text: &Text{Type: "mrkdwn", Text: cut(why, slackTextMax)}},
			{Type: "section", Fields: fields},
			{Type: "actions", Elements: []Element{{
				Type: "button", Text: Text{Type: "plain_text", Text: cut("Review in guard", slackButtonMax)},
				URL: h.URL, ActionID: "guard-review", Style: "primary",
			}}},
			{Type: "context", Elements: []Element{{Type: "mrkdwn", Text: "Approval `" + escape(h.Approval) + "`"}}},
		},
	}
}

// escape escapes the three characters Slack's mrkdwn reserves for its
// own markup (links, mentions, dates).
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// cut shortens s to at most n characters, marking the cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

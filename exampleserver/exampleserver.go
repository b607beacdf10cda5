// Package exampleserver is a small stdio MCP server built on the official Go
// SDK, with a tool of each kind policy tells apart: read-only, destructive,
// non-destructive write, open-world, one with no annotations and one with an
// output schema. It keeps notes in memory. guard's quick start, demo and
// tests run it behind guard.
package exampleserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type notebook struct {
	mu    sync.Mutex
	notes map[string]string
	sent  []string
}

func ptr[T any](v T) *T { return &v }

// New returns the example server.
func New(logger *slog.Logger) *mcp.Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	nb := &notebook{notes: map[string]string{"welcome": "This is guard's example notebook."}}
	s := mcp.NewServer(&mcp.Implementation{Name: "guard-example", Version: "1.0.0"}, &mcp.ServerOptions{Logger: logger})

	type echoIn struct {
		Text  string `json:"text" jsonschema:"the text to send back"`
		Times int    `json:"times,omitempty" jsonschema:"how many times to repeat it (default once)"`
	}
	mcp.AddTool(s, &mcp.Tool{
		Name: "echo", Description: "Returns the text it is given.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return text(strings.Repeat(in.Text, max(in.Times, 1))), nil, nil
	})

	type titleIn struct {
		Title string `json:"title" jsonschema:"the note's title"`
	}
	mcp.AddTool(s, &mcp.Tool{
		Name: "read_note", Description: "Reads a note by its title.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in titleIn) (*mcp.CallToolResult, any, error) {
		nb.mu.Lock()
		defer nb.mu.Unlock()
		body, ok := nb.notes[in.Title]
		if !ok {
			return errorResult("no note titled %q", in.Title), nil, nil
		}
		return text(body), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name: "list_notes", Description: "Lists the titles of all notes.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return text(strings.Join(nb.titles(), "\n")), nil, nil
	})

	type writeIn struct {
		Title string `json:"title" jsonschema:"the note's title"`
		Body  string `json:"body" jsonschema:"the note's text"`
	}
	mcp.AddTool(s, &mcp.Tool{
		Name: "write_note", Description: "Creates or replaces a note.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, any, error) {
		nb.mu.Lock()
		nb.notes[in.Title] = in.Body
		nb.mu.Unlock()
		return text("saved " + in.Title), nil, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name: "delete_note", Description: "Deletes a note for good.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in titleIn) (*mcp.CallToolResult, any, error) {
		nb.mu.Lock()
		defer nb.mu.Unlock()
		if _, ok := nb.notes[in.Title]; !ok {
			return errorResult("no note titled %q", in.Title), nil, nil
		}
		delete(nb.notes, in.Title)
		return text("deleted " + in.Title), nil, nil
	})

	type sendIn struct {
		To      string `json:"to" jsonschema:"who receives the message"`
		Message string `json:"message" jsonschema:"the message"`
	}
	mcp.AddTool(s, &mcp.Tool{
		Name: "send_message", Description: "Sends a message to someone outside the notebook.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, any, error) {
		nb.mu.Lock()
		nb.sent = append(nb.sent, in.To+": "+in.Message)
		nb.mu.Unlock()
		return text(fmt.Sprintf("would have sent %d bytes to %s (the example server sends nothing)", len(in.Message), in.To)), nil, nil
	})

	type taskIn struct {
		Task    string `json:"task" jsonschema:"what to do"`
		Seconds int    `json:"seconds,omitempty" jsonschema:"how long the task takes"`
	}
	mcp.AddTool(s, &mcp.Tool{
		Name: "run_task", Description: "Runs a named task, reporting progress and logging its start and end. Declares no annotations.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in taskIn) (*mcp.CallToolResult, any, error) {
		// Log sends only once the client has set a logging level.
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "run_task", Data: "started " + in.Task})
		steps := max(in.Seconds*4, 1)
		for i := range steps {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: tok, Progress: float64(i + 1), Total: float64(steps), Message: in.Task,
				})
			}
			if in.Seconds > 0 {
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "run_task", Data: "finished " + in.Task})
		return text("done: " + in.Task), nil, nil
	})

	type statsOut struct {
		Notes int `json:"notes" jsonschema:"how many notes there are"`
		Bytes int `json:"bytes" jsonschema:"their total size"`
		Sent  int `json:"sent" jsonschema:"messages sent"`
	}
	mcp.AddTool(s, &mcp.Tool{
		Name: "note_stats", Description: "Counts the notes and their size.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, statsOut, error) {
		nb.mu.Lock()
		defer nb.mu.Unlock()
		out := statsOut{Notes: len(nb.notes), Sent: len(nb.sent)}
		for _, b := range nb.notes {
			out.Bytes += len(b)
		}
		return nil, out, nil
	})
	return s
}

func (nb *notebook) titles() []string {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	var t []string
	for k := range nb.notes {
		t = append(t, k)
	}
	slices.Sort(t)
	return t
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func errorResult(format string, args ...any) *mcp.CallToolResult {
	r := text(fmt.Sprintf(format, args...))
	r.IsError = true
	return r
}

// Run serves the example server on in and out until in ends.
func Run(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	return New(nil).Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
}

package proxy

import (
	"encoding/json"
	"fmt"
	"sync"

	guard "github.com/guard-mcp/guard"
)

// catalog is a session's view of its server's tools: the definitions the
// server listed, each with its pin. Policy reads a tool's annotations from
// here, never from the call.
type catalog struct {
	mu    sync.RWMutex
	tools map[string]*guard.Tool
}

func newCatalog() *catalog { return &catalog{tools: map[string]*guard.Tool{}} }

func (c *catalog) get(name string) *guard.Tool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.tools[name]
}

// add records tools listed on one page; replace, after a full listing,
// drops the tools the server no longer lists.
func (c *catalog) add(tools []guard.Tool, replace bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if replace {
		c.tools = make(map[string]*guard.Tool, len(tools))
	}
	for i := range tools {
		t := tools[i]
		c.tools[t.Name] = &t
	}
}

// parseTools reads the tools of one tools/list result. A definition that
// cannot be pinned is skipped, and the returned error says which; the
// tool then stays unknown to policy, which holds or refuses calls to it.
func parseTools(server string, result []byte) (tools []guard.Tool, next string, err error) {
	var page struct {
		Tools      []json.RawMessage `json:"tools"`
		NextCursor string            `json:"nextCursor"`
	}
	if err := json.Unmarshal(result, &page); err != nil {
		return nil, "", fmt.Errorf("tools/list result: %w", err)
	}
	var errs []error
	for _, def := range page.Tools {
		var head struct {
			Name        string            `json:"name"`
			Annotations guard.Annotations `json:"annotations"`
		}
		if err := json.Unmarshal(def, &head); err != nil || head.Name == "" {
			errs = append(errs, fmt.Errorf("a tool definition without a readable name: %.200s", def))
			continue
		}
		pin, err := guard.PinOf(def)
		if err != nil {
			errs = append(errs, fmt.Errorf("tool %q: %w", head.Name, err))
			continue
		}
		tools = append(tools, guard.Tool{
			Server:      server,
			Name:        head.Name,
			Def:         append(json.RawMessage(nil), def...),
			Pin:         pin,
			Annotations: head.Annotations,
		})
	}
	if len(errs) > 0 {
		err = fmt.Errorf("tools/list: %d definitions skipped: %w", len(errs), errs[0])
	}
	return tools, page.NextCursor, err
}

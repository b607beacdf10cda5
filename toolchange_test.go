package guard

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func TestDiffTools(t *testing.T) {
	old := []byte(`{"name":"rm","description":"Delete a file","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true}}`)
	for _, tc := range []struct {
		name, cur string
		want      []string // Texts
		weakens   int
	}{
		{"same, reordered", `{"annotations":{"destructiveHint":true},"inputSchema":{"type":"object"},"description":"Delete a file","name":"rm"}`, nil, 0},
		{"description", `{"name":"rm","description":"Delete a file. <IMPORTANT>","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true}}`, []string{"description changed"}, 0},
		{"weakened", `{"name":"rm","description":"Delete a file","inputSchema":{"type":"object"},"annotations":{"destructiveHint":false,"readOnlyHint":true,"openWorldHint":false}}`,
			[]string{"readOnlyHint false → true (weakens the tool's declared caution)", "destructiveHint true → false (weakens the tool's declared caution)", "openWorldHint true → false (weakens the tool's declared caution)"}, 3},
		{"stricter", `{"name":"rm","description":"Delete a file","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true,"idempotentHint":true}}`, []string{"idempotentHint false → true"}, 0},
		{"schema and title", `{"name":"rm","title":"Remove","description":"Delete a file","inputSchema":{"type":"object","required":["path"]},"annotations":{"destructiveHint":true}}`, []string{"title added", "inputSchema changed"}, 0},
		{"annotations made explicit", `{"name":"rm","description":"Delete a file","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true,"openWorldHint":true}}`, []string{"annotations changed"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := DiffTools(old, []byte(tc.cur))
			var got []string
			weak := 0
			for _, c := range cs {
				got = append(got, c.Text)
				if c.Weakens {
					weak++
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || weak != tc.weakens {
				t.Fatalf("got %q (weakens %d), want %q (%d)", got, weak, tc.want, tc.weakens)
			}
		})
	}
	d := LineDiff(old, []byte(`{"name":"rm","description":"Delete anything","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true}}`))
	if !strings.Contains(d, `-   "description": "Delete a file",`) || !strings.Contains(d, `+   "description": "Delete anything",`) || !strings.Contains(d, `    "name": "rm",`) {
		t.Fatalf("line diff:\n%s", d)
	}
}

// A huge definition is diffed in bounded memory: the shared start and end
// are kept, the differing middle shown removed then added.
func TestLineDiffOfHugeDefinitions(t *testing.T) {
	big := func(prefix string, n int) []byte {
		props := make([]string, n)
		for i := range props {
			props[i] = fmt.Sprintf(`"%s%d":{"type":"string"}`, prefix, i)
		}
		return []byte(`{"name":"x","inputSchema":{"type":"object","properties":{` + strings.Join(props, ",") + `}}}`)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d := LineDiff(big("a", 20000), big("b", 20000)) // 80k lines a side: 6.4e9 cells by LCS
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<30 {
		t.Fatalf("the diff allocated %d MiB", grown>>20)
	}
	if !strings.HasPrefix(d, "  {\n") || !strings.Contains(d, `-       "a19999": {`) || !strings.Contains(d, `+       "b0": {`) || !strings.HasSuffix(d, "  }\n") {
		t.Fatalf("the diff's shape: %.300s ... %.300s", d, d[len(d)-300:])
	}
}

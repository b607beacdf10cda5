package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
)

// ToolVersion is one definition of a tool, with when it was first and last
// listed.
type ToolVersion struct {
	Tool      guard.Tool
	FirstSeen time.Time
	LastSeen  time.Time
}

// RecordTools records the definitions a server listed: a new definition
// (by pin) is added to the tool's history, a known one is marked seen.
func (db *DB) RecordTools(ctx context.Context, server string, tools []guard.Tool, seen time.Time) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record tools: %w", err)
	}
	defer tx.Rollback()
	at := fmtTime(seen)
	for _, t := range tools {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tools (server, name, pin, def, first_seen, last_seen)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (server, name, pin) DO UPDATE SET last_seen = excluded.last_seen`,
			server, t.Name, t.Pin, string(t.Def), at, at); err != nil {
			return fmt.Errorf("record tool %s/%s: %w", server, t.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record tools: %w", err)
	}
	return nil
}

// Tools returns the most recently listed definition of each tool of a
// server, or of every server when server is "".
func (db *DB) Tools(ctx context.Context, server string) ([]guard.Tool, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT server, name, pin, def FROM tools t
		WHERE (? = '' OR server = ?) AND rowid = (
			SELECT rowid FROM tools u WHERE u.server = t.server AND u.name = t.name
			ORDER BY last_seen DESC, rowid DESC LIMIT 1)
		ORDER BY server, name`, server, server)
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	defer rows.Close()
	var out []guard.Tool
	for rows.Next() {
		t, err := scanTool(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// ToolHistory returns every definition a server has shown for a tool,
// oldest first.
func (db *DB) ToolHistory(ctx context.Context, server, name string) ([]ToolVersion, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT server, name, pin, def, first_seen, last_seen FROM tools
		WHERE server = ? AND name = ? ORDER BY first_seen, rowid`, server, name)
	if err != nil {
		return nil, fmt.Errorf("tool history: %w", err)
	}
	defer rows.Close()
	var out []ToolVersion
	for rows.Next() {
		var first, last string
		t, err := scanTool(func(dest ...any) error { return rows.Scan(append(dest, &first, &last)...) })
		if err != nil {
			return nil, fmt.Errorf("tool history: %w", err)
		}
		out = append(out, ToolVersion{Tool: t, FirstSeen: parseTime(first), LastSeen: parseTime(last)})
	}
	return out, rows.Err()
}

func scanTool(scan func(dest ...any) error) (guard.Tool, error) {
	var t guard.Tool
	var def string
	if err := scan(&t.Server, &t.Name, &t.Pin, &def); err != nil {
		return t, err
	}
	t.Def = json.RawMessage(def)
	var head struct {
		Annotations guard.Annotations `json:"annotations"`
	}
	_ = json.Unmarshal(t.Def, &head)
	t.Annotations = head.Annotations
	return t, nil
}

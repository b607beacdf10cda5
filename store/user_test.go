package store

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/migrations"
)

// dropUserColumns is the SQL that takes an SQLite database opened with
// rawDB (its triggers dropped) back to the schema of the release before
// the user migration: its view and columns as they were, the migration
// not applied.
func dropUserColumns(t testing.TB) string {
	t.Helper()
	b, err := fs.ReadFile(migrations.SQLite(), "0015_record_user.sql")
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	view := body[strings.Index(body, "DROP VIEW IF EXISTS calls;"):strings.Index(body, "-- Retention")]
	view = strings.Replace(view, ",\n    q.user_subject,\n    q.user_email,\n    q.user_groups", "", 1)
	if strings.Contains(view, "user_") {
		t.Fatal("the view of the release before still names a user column")
	}
	return `DROP VIEW calls;
		DROP INDEX call_index_user_subject; DROP INDEX call_index_user_email;
		ALTER TABLE call_index DROP COLUMN user_subject; ALTER TABLE call_index DROP COLUMN user_email;
		ALTER TABLE records DROP COLUMN user_subject; ALTER TABLE records DROP COLUMN user_email;
		ALTER TABLE records DROP COLUMN user_groups; ALTER TABLE approvals DROP COLUMN user_subject;
		ALTER TABLE approvals DROP COLUMN user_email; ALTER TABLE approvals DROP COLUMN user_groups;
		DELETE FROM schema_migrations WHERE version = 15;
		` + view
}

// Package migrations holds guard's database schema as numbered SQL files,
// applied in order, each once, each in its own transaction.
package migrations

import "embed"

// FS holds the migration files, named NNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS

// Package migrations holds guard's database schema as numbered SQL files,
// one set per engine, applied in order, each once, each in its own
// transaction. A version number means the same schema on both engines:
// PostgreSQL's first migration creates at once what SQLite's first twelve
// built up, and a migration that one engine alone needs is a file holding
// only a comment on the other (0013: PostgreSQL's change notifications).
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// SQLite holds the SQLite migrations, named NNNN_description.sql.
func SQLite() fs.FS { return sub("sqlite") }

// Postgres holds the PostgreSQL migrations, named NNNN_description.sql.
func Postgres() fs.FS { return sub("postgres") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the directory is embedded: cannot happen
	}
	return f
}

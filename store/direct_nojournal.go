//go:build guard_sqlite_direct

package store

// sqliteDirect: see direct_journal.go.
const sqliteDirect = true

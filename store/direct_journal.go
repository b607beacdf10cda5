//go:build !guard_sqlite_direct

package store

// sqliteDirect makes appends on SQLite go straight to the ingester's
// group commit, acknowledged once committed at the durability asked for,
// as on PostgreSQL, instead of through the private journal. It is false
// but in a binary built with the tag guard_sqlite_direct, which exists
// only to measure the journal against SQLite alone (issue 27).
const sqliteDirect = false

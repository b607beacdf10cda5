package postgres

// Separators is what separates words for the text index on
// PostgreSQL, as for SQLite's FTS5 (unicode61): whitespace and ASCII
// punctuation, the underscore among it, so that /etc/passwd, delete_all
// and user@example.com are each several words. It is replaced by spaces
// before PostgreSQL's parser reads the text, which would otherwise take
// such a string as one word (a file name, an e-mail address). A bracket
// expression of ranges, not a character class, so that the database's
// locale does not change it.
const Separators = "[[:space:]!-/:-@[-`{-~]+"

// Words is the SQL of the words of the text expr, for the text index.
func Words(expr string) string {
	return "to_tsvector('simple', regexp_replace(" + expr + ", '" + Separators + "', ' ', 'g'))"
}

package postgres

import "testing"

func TestURLHasPassword(t *testing.T) {
	for url, want := range map[string]bool{
		"postgres://guard@db.internal/guard":                        false,
		"postgres://guard@db.internal:5432/guard?sslmode=require":   false,
		"postgresql://db.internal/guard":                            false,
		"postgres://guard:S3cret@db.internal/guard":                 true,
		"postgres://guard:@db.internal/guard":                       false, // an empty password, which pgx takes for none
		"postgres://db.internal?x=a:S3cret@db/guard":                true,  // pgx reads "db.internal?x=a" as the user
		"postgres://guard@db.internal/guard?password=S3cret":        true,
		"postgres://guard:S3cret@h1:5432,h2:5432/guard":             true,
		"postgres://guard@h1:5432,h2:5432/guard":                    false,
		"postgres://guard@h1:5432,h2:5432/guard?password=x&a=b":     true,
		"postgresql://guard:p%40ss@db.internal/guard":               true,
		"postgres://guard@db.internal/guard?application_name=a:b@c": false,
	} {
		if got := URLHasPassword(url); got != want {
			t.Errorf("URLHasPassword(%q) = %v, want %v", url, got, want)
		}
	}
}

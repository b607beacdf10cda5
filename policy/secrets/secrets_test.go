package secrets_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guard-mcp/guard/policy/secrets"
)

// Fake values in the shape of real ones.
const (
	awsAccessKey = "AKIAIOSFODNN7EXAMPLE"
	awsSecretKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	githubPAT    = "ghp_R8v2Kq7LmW3xT9bN4cZ1pY6sH0jD5fG2aE8u" // ghp_ and 36
	githubFine   = "github_pat_11ABCDEFG0123456789abc_dEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz01"
	gitlabPAT    = "glpat-xYz12AbC34dEf56GhI78jK"
	slackBot     = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	slackHook    = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
	googleKey    = "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe" // AIza and 35
	stripeKey    = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	anthropicKey = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-AbCdEfGhIj_AA"
	openAIKey    = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd"
	jwt          = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	rsaKey       = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naFDrBz9vFqU4yA8XPA2JHV2dA1KjMTAQ3x7Bj0I4uYJmBf0AVu+VYyLZMHYY\n-----END RSA PRIVATE KEY-----"
	opensshKey   = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----"
)

func masker(t testing.TB, extra ...string) *secrets.Masker {
	t.Helper()
	m, err := secrets.New(extra)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func red(kind string) string { return "[REDACTED:" + kind + "]" }

// maskCases are texts with secrets and what Mask makes of them.
var maskCases = []struct {
	name, in, want string
	n              int
}{
	{"aws access key", "id=" + awsAccessKey + ";", "id=" + red("aws_access_key") + ";", 1},
	{"aws temporary key", "ASIAY34FZKBOKMUTVV7A", red("aws_access_key"), 1},
	{"aws secret key env", "export AWS_SECRET_ACCESS_KEY=" + awsSecretKey + "\n", "export AWS_SECRET_ACCESS_KEY=" + red("aws_secret_key") + "\n", 1},
	{"aws secret key ini", "aws_secret_access_key = " + awsSecretKey, "aws_secret_access_key = " + red("aws_secret_key"), 1},
	{"aws secret key json text", `{"SecretAccessKey": "` + awsSecretKey + `"}`, `{"SecretAccessKey": "` + red("aws_secret_key") + `"}`, 1},
	{"github classic", "token " + githubPAT + " ok", "token " + red("github_token") + " ok", 1},
	{"github oauth", "gho_" + githubPAT[4:], red("github_token"), 1},
	{"github fine-grained", "GITHUB_TOKEN=" + githubFine, "GITHUB_TOKEN=" + red("github_token"), 1},
	{"gitlab", "PRIVATE-TOKEN: " + gitlabPAT, "PRIVATE-TOKEN: " + red("gitlab_token"), 1},
	{"slack token", "SLACK_BOT_TOKEN=" + slackBot, "SLACK_BOT_TOKEN=" + red("slack_token"), 1},
	{"slack webhook", "post to " + slackHook + " now", "post to " + red("slack_webhook") + " now", 1},
	{"private key", "key:\n" + rsaKey + "\nend", "key:\n" + red("private_key") + "\nend", 1},
	{"openssh private key", opensshKey, red("private_key"), 1},
	{"private key without end", "x " + rsaKey[:80], "x " + red("private_key"), 1},
	{"jwt", "/cb?id_token=" + jwt + "&x=1", "/cb?id_token=" + red("jwt") + "&x=1", 1},
	{"bearer jwt", "Authorization: Bearer " + jwt, "Authorization: Bearer " + red("jwt"), 1},
	{"bearer opaque", "authorization: bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "authorization: bearer " + red("bearer"), 1},
	{"basic auth", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic " + red("basic_auth"), 1},
	{"google api key", "key=" + googleKey + "&q=1", "key=" + red("google_api_key") + "&q=1", 1},
	{"stripe", "STRIPE_KEY=" + stripeKey, "STRIPE_KEY=" + red("stripe_key"), 1},
	{"stripe restricted test", "rk_test_51H8zXyAbCdEfGhIjKlMnOpQr", red("stripe_key"), 1},
	{"anthropic", "ANTHROPIC_API_KEY=" + anthropicKey, "ANTHROPIC_API_KEY=" + red("anthropic_key"), 1},
	{"openai", "OPENAI_API_KEY=" + openAIKey, "OPENAI_API_KEY=" + red("openai_key"), 1},
	{"several", awsAccessKey + " and " + githubPAT + ", " + awsAccessKey, red("aws_access_key") + " and " + red("github_token") + ", " + red("aws_access_key"), 3},
	{"adjacent", githubPAT + "\n" + stripeKey, red("github_token") + "\n" + red("stripe_key"), 2},
	{"password=", "mysql -u root password=hunter2 db", "mysql -u root password=" + red("credential") + " db", 1},
	{"env password", "PGHOST=db\nPGPASSWORD=Zx9!kq2LmP0wRt7v\n", "PGHOST=db\nPGPASSWORD=" + red("credential") + "\n", 1},
	{"yaml password", "db:\n  user: app\n  password: s3cr3t!\n", "db:\n  user: app\n  password: " + red("credential") + "\n", 1},
	{"token:", "token: 8fj3KdQ92lxPzM0aBv7c", "token: " + red("credential"), 1},
	{"value with a $", "password=$ecret1 and PASSWORD=$5up3r", "password=" + red("credential") + " and PASSWORD=" + red("credential"), 2},
	{"typed declaration", `password: str = "hunter2"`, `password: str = "` + red("credential") + `"`, 1},
	{"connection string", "Server=db;User Id=sa;Password=Pa$$w0rd;", "Server=db;User Id=sa;Password=" + red("credential"), 1},
	{"secret=", "secret=abc123;user=x", "secret=" + red("credential"), 1},
	// An unquoted value runs to a blank, a line end or a quote, whatever
	// punctuation is in it.
	{"value with &", "DB_PASSWORD=Tr0ub4dor&3xyz next", "DB_PASSWORD=" + red("credential") + " next", 1},
	{"value with parentheses", "password=hunter2)(x", "password=" + red("credential"), 1},
	{"value with , and ;", "PGPASSWORD=pa,ss;word\n", "PGPASSWORD=" + red("credential") + "\n", 1},
	{"value with dots", "password=correct.horse.battery", "password=" + red("credential"), 1},
	{"value in angle brackets", "password=<s3cr3t>", "password=" + red("credential"), 1},
	{"value in braces", "password={Xy7!q}", "password=" + red("credential"), 1},
	{"value like a call", "password=Summer(2024)", "password=" + red("credential"), 1},
	{"value in a quoted command", `sh -c "password=a,b;c" x`, `sh -c "password=` + red("credential") + `" x`, 1},
	{"aligned", "user         = app\npassword     = x\n", "user         = app\npassword     = " + red("credential") + "\n", 1},
	{"aligned with tabs", "token\t\t\t\t\t: t0k3n", "token\t\t\t\t\t: " + red("credential"), 1},
	// In a URL's query string an "&" ends the value.
	{"query parameter after &", "https://h/p?a=1&token=abc,d&b=2 ok", "https://h/p?a=1&token=" + red("credential") + "&b=2 ok", 1},
	{"& without a query", "x&password=a&b", "x&password=" + red("credential"), 1},
	{"not a variable", "password=${A}x&b token=${PASSWORD:-hunter2}", "password=" + red("credential") + " token=" + red("credential"), 2},
	{"not a template", "password={{abc", "password=" + red("credential"), 1},
	// A mask in a value is left, and what follows it is read.
	{"after a mask", "token=" + red("credential") + ",password=hunter2", "token=" + red("credential") + ",password=" + red("credential"), 1},
	{"after a mask, quoted", `token="` + red("jwt") + ` password=hunter2"`, `token="` + red("jwt") + ` password=` + red("credential") + `"`, 1},
	{"api_key=", "curl https://api.example.com/?api_key=k-8f3a9c2e&q=1", "curl https://api.example.com/?api_key=" + red("credential") + "&q=1", 1},
	{"camel case, quoted", `clientSecret = "two words"`, `clientSecret = "` + red("credential") + `"`, 1},
	{"json text", `{"user": "app", "password": "hunter2"}`, `{"user": "app", "password": "` + red("credential") + `"}`, 1},
	{"go :=", `apiKey := 'k-12345'`, `apiKey := '` + red("credential") + `'`, 1},
	{"ruby =>", `:auth_token => tok_abc`, `:auth_token => ` + red("credential"), 1},
	{"postgres url", "postgres://app:S3cret@db.internal:5432/prod", "postgres://app:" + red("url_credential") + "@db.internal:5432/prod", 1},
	{"https url", "clone https://alice:hunter2@git.example.com/r.git", "clone https://alice:" + red("url_credential") + "@git.example.com/r.git", 1},
	{"redis url without user", "redis://:p4ss@cache:6379/0", "redis://:" + red("url_credential") + "@cache:6379/0", 1},
	{"url password with @", "mongodb://u:p@ss@h/db", "mongodb://u:" + red("url_credential") + "@h/db", 1},
	{"url in an assignment", "DATABASE_URL=mysql://root:toor@127.0.0.1/app", "DATABASE_URL=mysql://root:" + red("url_credential") + "@127.0.0.1/app", 1},
}

func TestMask(t *testing.T) {
	m := masker(t)
	for _, c := range maskCases {
		t.Run(c.name, func(t *testing.T) {
			got, n := m.Mask(c.in)
			if got != c.want || n != c.n {
				t.Errorf("Mask(%q)\n = %q, %d\nwant %q, %d", c.in, got, n, c.want, c.n)
			}
			again, n := m.Mask(got)
			if again != got || n != 0 {
				t.Errorf("masking again = %q, %d", again, n)
			}
		})
	}
}

// Every built-in kind has a case above.
func TestKindsHaveCases(t *testing.T) {
	kinds := secrets.Kinds()
	if len(kinds) < 14 {
		t.Errorf("Kinds() = %v", kinds)
	}
	for _, k := range kinds {
		found := false
		for _, c := range maskCases {
			found = found || strings.Contains(c.want, red(k))
		}
		if !found {
			t.Errorf("no Mask case for %s", k)
		}
	}
	sorted := slices.Clone(kinds)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(kinds) {
		t.Errorf("Kinds() repeats a kind: %v", kinds)
	}
}

// nearMisses look like secrets and are not.
var nearMisses = []struct{ name, in string }{
	{"aws prefix and 15", "AKIAIOSFODNN7EXAMPL"},
	{"aws prefix and 17", "AKIAIOSFODNN7EXAMPLEX"},
	{"aws inside a word", "xAKIAIOSFODNN7EXAMPLE"},
	{"aws lower case", "akiaiosfodnn7example"},
	{"aws secret without name", "value=" + awsSecretKey},
	{"aws secret too long", "aws_secret_access_key=" + awsSecretKey + "X"},
	{"ghp short", "ghp_short"},
	{"ghp 35", githubPAT[:39]},
	{"ghp in a word", "xghp_" + githubPAT[4:]},
	{"gh other letter", "ghx_" + githubPAT[4:]},
	{"gitlab short", "glpat-short"},
	{"slack short", "xoxb-123"},
	{"slack other letter", "xoxz-123456789012-abcdefghij"},
	{"slack webhook without ids", "https://hooks.slack.com/services/"},
	{"public key", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"},
	{"certificate", "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----"},
	{"eyJ alone", "eyJ"},
	{"jwt header only", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"},
	{"jwt two parts", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"},
	{"bearer in prose", "the bearer of this letter is a friend"},
	{"bearer word then long word", "Bearer token-based-authentication is described below"},
	{"bearer short", "Bearer abc123"},
	{"basic in prose", "basic information about the authorization process"},
	{"google short", "AIzaSyDaGmWKa4JsXZ"},
	{"stripe short", "sk_live_short"},
	{"stripe other", "sk_prod_4eC39HqLyjWDarjtT1zdp7dc"},
	{"sk- without digits", "pip install sk-learn-compatible-estimators"},
	{"sk- short", "sk-123"},
	{"task- prefix", "task-1234567890abcdefghijklmnop"},
	{"uuid", "123e4567-e89b-12d3-a456-426614174000"},
	{"sha256", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	{"sha1", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
	{"base64 image", `{"image":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}`},
	{"mask", red("aws_access_key") + " " + red("bearer")},
	{"password_policy in prose", "the password_policy requires 12 characters; see password policy: docs"},
	{"secret word", "it is no secret that the token budget is tight"},
	{"no value", "password=\ntoken: \nsecret = ''"},
	{"booleans", "secret: true, token: null, password: false"},
	{"variables", "password=${DB_PASSWORD} token=$GITHUB_TOKEN secret: {{ .Secret }}"},
	{"code", `password = os.Getenv("DB_PASSWORD"); token := cfg.auth.token; secret: process.env.SECRET`},
	{"more code", `password = getpass(); token = read_secret(cfg.path), secret: {`},
	{"env path", `api_key = process.env.OPENAI_KEY;`},
	{"trailing punctuation", "f(token=None, password=null) x = {secret: undefined}"},
	{"template", "password={{.Password}} token: ${TOKEN},"},
	{"pagination", "pageToken=CAoQAA nextToken: abc123 max_tokens: 4096"},
	{"progress token", `{"_meta":{"progressToken":"p7"}}`},
	{"comparison", "if token == expected { return }"},
	{"other settings", "password_min_length=12 token_type=bearer secret_name: prod-db tokens: 12"},
	{"url without credentials", "https://example.com/path?q=1&lang=en#top"},
	{"url with a user only", "ssh://git@github.com/org/repo.git and https://alice@example.com/"},
	{"email", "write to alice@example.com or bob:x@example.com"},
	{"scp-like", "git@github.com:org/repo.git"},
	{"at in a path", "https://example.com/@alice/posts"},
	{"masked setting", "password=" + red("credential") + " https://u:" + red("url_credential") + "@h/"},
	{"empty", ""},
}

func TestMaskNearMisses(t *testing.T) {
	m := masker(t)
	for _, c := range nearMisses {
		t.Run(c.name, func(t *testing.T) {
			if got, n := m.Mask(c.in); got != c.in || n != 0 {
				t.Errorf("Mask(%q) = %q, %d; want it unchanged", c.in, got, n)
			}
			if got, n := m.MaskJSON([]byte(c.in)); string(got) != c.in || n != 0 {
				t.Errorf("MaskJSON(%q) = %q, %d; want it unchanged", c.in, got, n)
			}
		})
	}
}

// Text with no secret comes back as it is, without allocating.
func TestMaskCleanDoesNotAllocate(t *testing.T) {
	if raceDetector {
		t.Skip("allocations are not counted with the race detector")
	}
	m := masker(t, `corp-[0-9]{6}`)
	for _, c := range nearMisses {
		if allocs := testing.AllocsPerRun(20, func() { m.Mask(c.in) }); allocs != 0 {
			t.Errorf("Mask(%q): %v allocations", c.in, allocs)
		}
	}
}

func TestExtraPatterns(t *testing.T) {
	m := masker(t, `corp-[0-9]{6}`, `(?i)pin=(?P<secret>[^&\s]+)`, `(tenant|org)-[a-f0-9]{8}`)
	cases := []struct {
		in, want string
		n        int
	}{
		{"ticket corp-123456 and corp-12345", "ticket " + red("pattern") + " and corp-12345", 1},
		{"https://x/?user=a&PIN=1234&x=1", "https://x/?user=a&PIN=" + red("pattern") + "&x=1", 1},
		{"org-deadbeef " + awsAccessKey, red("pattern") + " " + red("aws_access_key"), 2},
		{"nothing here", "nothing here", 0},
	}
	for _, c := range cases {
		if got, n := m.Mask(c.in); got != c.want || n != c.n {
			t.Errorf("Mask(%q) = %q, %d; want %q, %d", c.in, got, n, c.want, c.n)
		}
	}
	// The built-in masker leaves them.
	if got, n := masker(t).Mask("corp-123456"); n != 0 {
		t.Errorf("without extra patterns: %q, %d", got, n)
	}
	// In JSON, with a literal behind an escape.
	got, n := m.MaskJSON([]byte(`{"t":"corp\u002d123456","p":1}`))
	if want := `{"t":"` + red("pattern") + `","p":1}`; string(got) != want || n != 1 {
		t.Errorf("MaskJSON = %s, %d; want %s, 1", got, n, want)
	}
}

func TestBadExtraPattern(t *testing.T) {
	for _, c := range []struct{ pattern, why string }{
		{`corp-(`, "missing closing )"},
		{`x{2,1}`, "invalid repeat count"},
		{`a*`, "matches empty text"},
		{``, "matches empty text"},
	} {
		m, err := secrets.New([]string{`ok-[0-9]+`, c.pattern})
		if err == nil || m != nil {
			t.Errorf("New(%q) = %v, %v; want an error", c.pattern, m, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%q", c.pattern)) || !strings.Contains(msg, c.why) {
			t.Errorf("New(%q) error %q does not name the pattern and %q", c.pattern, msg, c.why)
		}
	}
}

// A nil masker masks the built-in patterns.
func TestNilMasker(t *testing.T) {
	var m *secrets.Masker
	if got, n := m.Mask("k " + awsAccessKey); got != "k "+red("aws_access_key") || n != 1 {
		t.Errorf("nil Mask = %q, %d", got, n)
	}
	if got, n := m.MaskJSON([]byte(`["` + githubPAT + `"]`)); string(got) != `["`+red("github_token")+`"]` || n != 1 {
		t.Errorf("nil MaskJSON = %s, %d", got, n)
	}
}

func TestConcurrentUse(t *testing.T) {
	m := masker(t, `corp-[0-9]{6}`)
	doc := []byte(`{"a":"` + awsAccessKey + `","b":"corp-123456","c":"x\u0041KIA"}`)
	want, _ := m.MaskJSON(doc)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if got, _ := m.MaskJSON(doc); string(got) != string(want) {
					t.Errorf("got %s, want %s", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Long runs of near misses take time in proportion to their length: a
// pattern does not read a run again from each literal in it.
func TestMaskLongRuns(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("long inputs, timed")
	}
	const size = 1 << 17
	m := masker(t)
	for _, unit := range []string{
		"eyJ-", "eyJabcdefghij.", "sk-", "sk-ant-", "Bearer ", "bearer-", "Bearer\t",
		"AKIA", "ghp_", "github_pat_", "glpat-", "xoxb-", "AIza", "sk_live_", "-----BEGIN RSA PRIVATE KEY-----",
		"-----END RSA PRIVATE KEY-----", "secret_access_key", "authorization: ", "https://hooks.slack.com/services/T",
		"token={{", "token=${A}", "token=[REDACTED:x]", "token=null,", "token=f(", "?token=a&", "&token=", "token \t", "token\\t=",
	} {
		in := strings.Repeat(unit, size/len(unit))
		for _, s := range []string{in, "Bearer " + in, "eyJ" + in, "sk-" + in, "-----BEGIN PRIVATE KEY-----" + in} {
			start := time.Now()
			out, _ := m.Mask(s)
			if d := time.Since(start); d > time.Second {
				t.Errorf("Mask(%q...) took %v", s[:40], d)
			}
			if again, n := m.Mask(out); n != 0 || again != out {
				t.Errorf("Mask(%q...) is masked again", s[:40])
			}
			start = time.Now()
			m.MaskJSON([]byte(jsonString(s)))
			if d := time.Since(start); d > time.Second {
				t.Errorf("MaskJSON(%q...) took %v", s[:40], d)
			}
		}
	}
}

// Secrets next to each other, with or without something between them, are
// masked once and for all: masking the result again changes nothing.
func TestMaskNeighbours(t *testing.T) {
	m := masker(t)
	var values []string
	for _, c := range maskCases {
		values = append(values, c.in)
	}
	for _, c := range nearMisses {
		values = append(values, c.in)
	}
	for _, a := range values {
		for _, b := range values {
			for _, sep := range []string{"", " ", "-", "_", ".", "=", "\n", "/", "Bearer "} {
				s := a + sep + b
				out, n := m.Mask(s)
				if again, k := m.Mask(out); k != 0 || again != out {
					t.Fatalf("Mask(%q) = %q, %d; again %q, %d", s, out, n, again, k)
				}
				doc := []byte(jsonString(s))
				got, k := m.MaskJSON(doc)
				var v string
				if err := json.Unmarshal(got, &v); err != nil || v != out || k != n {
					t.Fatalf("MaskJSON(%s) = %s, %d; want %q, %d", doc, got, k, out, n)
				}
			}
		}
	}
}

// Known values are masked exactly, in text and in JSON strings (escaped
// or not), beside the built-in patterns or alone; short values are not.
func TestValues(t *testing.T) {
	const tok = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	const quoted = `pa"ss\word-1234`
	for _, m := range []*secrets.Masker{secrets.Values("guard-secret", []string{tok, quoted, "short"}),
		(*secrets.Masker)(nil).WithValues("guard-secret", []string{tok, quoted, "short"})} {
		if got, n := m.Mask("token " + tok + ", short, again " + tok); n != 2 || got != "token [REDACTED:guard-secret], short, again [REDACTED:guard-secret]" {
			t.Errorf("Mask: %q, %d", got, n)
		}
		doc := []byte(`{"text":"x` + tok + `y","p":"` + jsonString(quoted)[1:len(jsonString(quoted))-1] + `","u":"\u0030f1e2d3c4b5a69788796a5b4c3d2e1f0"}`)
		got, n := m.MaskJSON(doc)
		if n != 3 || string(got) != `{"text":"x[REDACTED:guard-secret]y","p":"[REDACTED:guard-secret]","u":"[REDACTED:guard-secret]"}` {
			t.Errorf("MaskJSON: %s, %d", got, n)
		}
		if again, n := m.MaskJSON(got); n != 0 || string(again) != string(got) {
			t.Errorf("masking again: %s, %d", again, n)
		}
	}
	only := secrets.Values("guard-secret", []string{tok})
	if got, n := only.MaskJSON([]byte(`{"k":"AKIAIOSFODNN7EXAMPLE","authorization":"Bearer abcdefghijkl"}`)); n != 0 {
		t.Errorf("a values-only masker masked a built-in pattern: %s", got)
	}
	got, n := masker(t).WithValues("guard-secret", []string{tok}).Mask("AKIAIOSFODNN7EXAMPLE " + tok)
	if n != 2 || got != "[REDACTED:aws_access_key] [REDACTED:guard-secret]" {
		t.Errorf("with the built-ins: %q, %d", got, n)
	}
}

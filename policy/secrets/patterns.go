package secrets

import (
	"regexp"
	"slices"
)

// The built-in kinds.
const (
	KindPrivateKey   = "private_key"
	KindAWSAccessKey = "aws_access_key"
	KindAWSSecretKey = "aws_secret_key"
	KindGitHubToken  = "github_token"
	KindGitLabToken  = "gitlab_token"
	KindSlackToken   = "slack_token"
	KindSlackWebhook = "slack_webhook"
	KindGoogleAPIKey = "google_api_key"
	KindStripeKey    = "stripe_key"
	KindAnthropicKey = "anthropic_key"
	KindOpenAIKey    = "openai_key"
	KindJWT          = "jwt"
	KindBearer       = "bearer"
	KindBasicAuth    = "basic_auth"
	// KindCredential is the value given to a setting whose name says it
	// is a secret: password=..., "token": "...", api_key: ....
	KindCredential = "credential"
	// KindURLCredential is the password in a URL's user information:
	// postgres://user:pass@host.
	KindURLCredential = "url_credential"
)

// builtins are the built-in patterns, in Kinds order. Each is found by
// its anchors, bytes of its literal that are rare in text, and matched
// there by a regexp (given in the comment when the code does the work by
// hand).
var builtins = []*pattern{
	// -----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|$)
	// A key with no END line is masked to the end of the text.
	{
		kind:    KindPrivateKey,
		anchors: "B", lead: 5, checkS: checkPrivateKey[string], checkB: checkPrivateKey[[]byte],
		match: matchPrivateKey,
	},
	{
		kind:    KindAWSAccessKey,
		anchors: "A", checkS: checkAWSAccessKey[string], checkB: checkAWSAccessKey[[]byte],
		match:     anchored(`(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b`, 0),
		wordStart: true,
	},
	// Only the value is masked; "aws_secret_access_key = " is kept.
	{
		kind:    KindAWSSecretKey,
		anchors: "kK", lead: len("secretaccess"), checkS: checkAWSSecretKey[string], checkB: checkAWSSecretKey[[]byte],
		match: anchored(`(?i:secret[_-]?access[_-]?key)["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`, 1),
	},
	{
		kind:    KindGitHubToken,
		anchors: "g", checkS: checkGitHubToken[string], checkB: checkGitHubToken[[]byte],
		match:     anchored(`(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b`, 0),
		wordStart: true,
	},
	{
		kind:    KindGitLabToken,
		anchors: "g", checkS: checkGitLabToken[string], checkB: checkGitLabToken[[]byte],
		match:     anchored(`glpat-[A-Za-z0-9_-]{20,}`, 0),
		wordStart: true,
	},
	{
		kind:    KindSlackToken,
		anchors: "x", checkS: checkSlackToken[string], checkB: checkSlackToken[[]byte],
		match:     anchored(`xox[abposr]-[A-Za-z0-9-]{10,}`, 0),
		wordStart: true,
	},
	{
		kind:    KindSlackWebhook,
		anchors: "k", lead: len("https://hoo"), checkS: checkSlackWebhook[string], checkB: checkSlackWebhook[[]byte],
		match: anchored(`https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+`, 0),
	},
	{
		kind:    KindGoogleAPIKey,
		anchors: "A", checkS: checkGoogleAPIKey[string], checkB: checkGoogleAPIKey[[]byte],
		match:     anchored(`(AIza[0-9A-Za-z_-]{35})(?:[^0-9A-Za-z_-]|$)`, 1),
		wordStart: true,
	},
	{
		kind:    KindStripeKey,
		anchors: "k", lead: 1, checkS: checkStripeKey[string], checkB: checkStripeKey[[]byte],
		match:     anchored(`[sr]k_(?:live|test)_[0-9A-Za-z]{24,}`, 0),
		wordStart: true,
	},
	// Before openai_key, which matches the same text.
	{
		kind:    KindAnthropicKey,
		anchors: "k", lead: 1, checkS: checkAnthropicKey[string], checkB: checkAnthropicKey[[]byte],
		match:     anchored(`sk-ant-[A-Za-z0-9_-]{20,}`, 0),
		wordStart: true,
	},
	// sk-[A-Za-z0-9_-]{20,}: sk-, sk-proj-, sk-svcacct-, ...; with at
	// least one digit, so that words such as
	// "sk-learn-compatible-estimators" are not taken.
	{
		kind:    KindOpenAIKey,
		anchors: "k", lead: 1, checkS: checkOpenAIKey[string], checkB: checkOpenAIKey[[]byte],
		match:     matchOpenAIKey,
		wordStart: true,
	},
	// eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}:
	// header, claims and signature. Before bearer: "Bearer <jwt>" is
	// masked as a jwt.
	{
		kind:    KindJWT,
		anchors: "J", lead: 2, checkS: checkJWT[string], checkB: checkJWT[[]byte],
		match:     matchJWT,
		wordStart: true,
	},
	// (?i:bearer)\s+([A-Za-z0-9._~+/=-]{16,}): the token is masked and
	// "Bearer " kept. A token has a digit, so that prose ("bearer
	// token-based-authentication") is not taken.
	{
		kind:    KindBearer,
		anchors: "bB", checkS: checkBearer[string], checkB: checkBearer[[]byte],
		match:     matchBearer,
		wordStart: true,
	},
	// The credentials are masked and "Authorization: Basic " kept.
	{
		kind:    KindBasicAuth,
		anchors: "zZ", lead: len("authori"), checkS: checkBasicAuth[string], checkB: checkBasicAuth[[]byte],
		match:     anchored(`(?i:authorization)["']?\s*[:=]\s*["']?(?i:basic)\s+([A-Za-z0-9+/=]{8,})`, 1),
		wordStart: true,
	},
	// [A-Za-z0-9_.-]*(password|passwd|passphrase|secret|token|api_key|...)
	// (quoted or not), =, :, := or =>, then the value, which is masked;
	// found from the separator, the name read backwards (assign.go). After
	// the others: a kind of its own wins where both match the same value
	// (GITHUB_TOKEN=ghp_...).
	{
		kind:    KindCredential,
		anchors: "=:", lead: len("token"), checkS: checkAssignment[string], checkB: checkAssignment[[]byte],
		match: matchAssignment,
	},
	// [A-Za-z][A-Za-z0-9+.-]*://user:(password)@: the password is masked,
	// the user and the host kept.
	{
		kind:    KindURLCredential,
		anchors: "@", lead: len("a://:x"), checkS: checkURLPassword[string], checkB: checkURLPassword[[]byte],
		match: matchURLPassword,
	},
}

// anchorGroups are the built-in patterns by anchor, so that a text is
// searched once for each anchor.
var anchorGroups []anchorGroup

type anchorGroup struct {
	anchor byte
	pats   []*pattern
}

func init() {
	for _, p := range builtins {
		p.mask = maskFor(p.kind)
		for _, c := range []byte(p.anchors) {
			i := slices.IndexFunc(anchorGroups, func(g anchorGroup) bool { return g.anchor == c })
			if i < 0 {
				i = len(anchorGroups)
				anchorGroups = append(anchorGroups, anchorGroup{anchor: c})
			}
			anchorGroups[i].pats = append(anchorGroups[i].pats, p)
		}
	}
}

// anchored returns a match function for expr, which must match at the
// start of the text; group is the part masked.
func anchored(expr string, group int) func(string) (int, int, bool) {
	re := regexp.MustCompile(`^(?:` + expr + `)`)
	return func(s string) (int, int, bool) {
		loc := re.FindStringSubmatchIndex(s)
		if loc == nil {
			return 0, 0, false
		}
		return loc[2*group], loc[2*group+1], true
	}
}

// Some patterns are matched by hand: those whose matches are checked
// further, as FindStringSubmatchIndex allocates for each match; and those
// that could read a long run of text again from each literal in it (as in
// "eyJ-eyJ-eyJ-..."), which say where the run ends when they fail.

func matchOpenAIKey(s string) (int, int, bool) {
	n := len("sk-")
	t := n + run(s[n:], isKeyByte)
	if t-n < 20 || !hasDigit(s[n:t]) {
		// An sk- further on in the run has fewer characters, no digit.
		return 0, t, false
	}
	return 0, t, true
}

func matchJWT(s string) (int, int, bool) {
	header := run(s, isKeyByte) // with the "eyJ"
	i, ok := header, header >= len("eyJ")+8
	if ok = ok && at(s, i, ".eyJ"); ok {
		n := run(s[i+1:], isKeyByte)
		i, ok = i+1+n, n >= len("eyJ")+8
	}
	if ok = ok && at(s, i, "."); ok {
		n := run(s[i+1:], isKeyByte)
		i, ok = i+1+n, n >= 8
	}
	if !ok {
		// An eyJ further on in the header ends where this one does, and
		// fails as this one does.
		return 0, header, false
	}
	return 0, i, true
}

func matchBearer(s string) (int, int, bool) {
	n := len("bearer")
	f := n + run(s[n:], isSpace)
	if f == n {
		return 0, 0, false
	}
	t := f + run(s[f:], isToken68Byte)
	if t-f < 16 || !hasDigit(s[f:t]) {
		return 0, 0, false
	}
	return f, t, true
}

// run returns the length of the run of bytes at the start of s that are ok.
func run(s string, ok func(byte) bool) int {
	i := 0
	for i < len(s) && ok(s[i]) {
		i++
	}
	return i
}

// isKeyByte: [A-Za-z0-9_-].
func isKeyByte(c byte) bool { return isWordByte(c) || c == '-' }

// isSpace: \s in RE2, [\t\n\f\r ].
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

func hasDigit(s string) bool {
	for i := 0; i < len(s); i++ {
		if '0' <= s[i] && s[i] <= '9' {
			return true
		}
	}
	return false
}

// The check functions are given the offset i of an anchor in s and return
// where the pattern's literal starts if it is there, or -1.

func checkPrivateKey[T text](s T, i int) int {
	h := i - len("-----")
	if !at(s, h, "-----BEGIN ") {
		return -1
	}
	if _, ok := pemLabel(s, h+len("-----BEGIN ")); !ok {
		return -1
	}
	return h
}

// pemLabel reads a private key's label, [A-Z0-9 ]*PRIVATE KEY( BLOCK)?,
// and the "-----" that ends it, at i; it returns the offset after them.
func pemLabel[T text](s T, i int) (int, bool) {
	j := i
	for j < len(s) && ('A' <= s[j] && s[j] <= 'Z' || '0' <= s[j] && s[j] <= '9' || s[j] == ' ') {
		j++
	}
	if !(j-i >= 11 && at(s, j-11, "PRIVATE KEY") || j-i >= 17 && at(s, j-17, "PRIVATE KEY BLOCK")) || !at(s, j, "-----") {
		return 0, false
	}
	return j + 5, true
}

// matchPrivateKey matches the block that starts s, a BEGIN line, up to the
// first END line for a private key, or up to the end of s.
func matchPrivateKey(s string) (int, int, bool) {
	end, ok := pemLabel(s, len("-----BEGIN "))
	if !ok {
		return 0, 0, false
	}
	for i := end; ; i++ {
		if i = indexLit(s, i, "-----END ", 5); i < 0 {
			return 0, len(s), true
		}
		if e, ok := pemLabel(s, i+len("-----END ")); ok {
			return 0, e, true
		}
	}
}

func checkAWSAccessKey[T text](s T, i int) int {
	if at(s, i, "AKIA") || at(s, i, "ASIA") || at(s, i, "ABIA") || at(s, i, "ACCA") || at(s, i, "A3T") {
		return i
	}
	return -1
}

// checkAWSSecretKey finds secret[_-]?access[_-]?key, in any case, from the
// "k" of "key".
func checkAWSSecretKey[T text](s T, i int) int {
	if !atFold(s, i, "key") {
		return -1
	}
	k := i
	for _, word := range [...]string{"access", "secret"} {
		if k > 0 && (s[k-1] == '_' || s[k-1] == '-') {
			k--
		}
		k -= len(word)
		if !atFold(s, k, word) {
			return -1
		}
	}
	return k
}

func checkGitHubToken[T text](s T, i int) int {
	if i+4 <= len(s) && s[i+1] == 'h' && s[i+3] == '_' {
		switch s[i+2] {
		case 'p', 'o', 'u', 's', 'r':
			return i
		}
	}
	if at(s, i, "github_pat_") {
		return i
	}
	return -1
}

func checkGitLabToken[T text](s T, i int) int { return lit(s, i, "glpat-") }

func checkSlackToken[T text](s T, i int) int {
	if at(s, i, "xox") && i+5 <= len(s) && s[i+4] == '-' {
		switch s[i+3] {
		case 'a', 'b', 'p', 'o', 's', 'r':
			return i
		}
	}
	return -1
}

func checkSlackWebhook[T text](s T, i int) int {
	return lit(s, i-len("https://hoo"), "https://hooks.slack.com/services/")
}

func checkGoogleAPIKey[T text](s T, i int) int { return lit(s, i, "AIza") }

// checkStripeKey finds sk_live_, sk_test_, rk_live_ and rk_test_ from
// their "k".
func checkStripeKey[T text](s T, i int) int {
	if i > 0 && (s[i-1] == 's' || s[i-1] == 'r') && (at(s, i+1, "_live_") || at(s, i+1, "_test_")) {
		return i - 1
	}
	return -1
}

func checkAnthropicKey[T text](s T, i int) int { return lit(s, i-1, "sk-ant-") }

func checkOpenAIKey[T text](s T, i int) int { return lit(s, i-1, "sk-") }

func checkJWT[T text](s T, i int) int { return lit(s, i-2, "eyJ") }

func checkBearer[T text](s T, i int) int {
	if atFold(s, i, "bearer") {
		return i
	}
	return -1
}

func checkBasicAuth[T text](s T, i int) int {
	if h := i - len("authori"); atFold(s, h, "authorization") {
		return h
	}
	return -1
}

// lit returns h if lit occurs in s at h, or -1.
func lit[T text](s T, h int, lit string) int {
	if at(s, h, lit) {
		return h
	}
	return -1
}

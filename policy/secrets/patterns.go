package secrets

import "regexp"

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
)

// builtins are the built-in patterns, in Kinds order. Each is a regexp
// (given in the comment when the code does the work by hand) tried where
// its next function finds its literal.
var builtins = []*pattern{
	// -----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|$)
	// A key with no END line is masked to the end of the text.
	{
		kind:  KindPrivateKey,
		nextS: nextPrivateKey[string], nextB: nextPrivateKey[[]byte],
		match: matchPrivateKey,
	},
	{
		kind:  KindAWSAccessKey,
		nextS: nextAWSAccessKey[string], nextB: nextAWSAccessKey[[]byte],
		match:     anchored(`(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b`, 0),
		wordStart: true,
	},
	// Only the value is masked; "aws_secret_access_key = " is kept.
	{
		kind:  KindAWSSecretKey,
		nextS: nextAWSSecretKey[string], nextB: nextAWSSecretKey[[]byte],
		match: anchored(`(?i:secret[_-]?access[_-]?key)["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`, 1),
	},
	{
		kind:  KindGitHubToken,
		nextS: nextGitHubToken[string], nextB: nextGitHubToken[[]byte],
		match:     anchored(`(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b`, 0),
		wordStart: true,
	},
	{
		kind:  KindGitLabToken,
		nextS: nextGitLabToken[string], nextB: nextGitLabToken[[]byte],
		match:     anchored(`glpat-[A-Za-z0-9_-]{20,}`, 0),
		wordStart: true,
	},
	{
		kind:  KindSlackToken,
		nextS: nextSlackToken[string], nextB: nextSlackToken[[]byte],
		match:     anchored(`xox[abposr]-[A-Za-z0-9-]{10,}`, 0),
		wordStart: true,
	},
	{
		kind:  KindSlackWebhook,
		nextS: nextSlackWebhook[string], nextB: nextSlackWebhook[[]byte],
		match: anchored(`https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+`, 0),
	},
	{
		kind:  KindGoogleAPIKey,
		nextS: nextGoogleAPIKey[string], nextB: nextGoogleAPIKey[[]byte],
		match:     anchored(`(AIza[0-9A-Za-z_-]{35})(?:[^0-9A-Za-z_-]|$)`, 1),
		wordStart: true,
	},
	{
		kind:  KindStripeKey,
		nextS: nextStripeKey[string], nextB: nextStripeKey[[]byte],
		match:     anchored(`[sr]k_(?:live|test)_[0-9A-Za-z]{24,}`, 0),
		wordStart: true,
	},
	// Before openai_key, which matches the same text.
	{
		kind:  KindAnthropicKey,
		nextS: nextAnthropicKey[string], nextB: nextAnthropicKey[[]byte],
		match:     anchored(`sk-ant-[A-Za-z0-9_-]{20,}`, 0),
		wordStart: true,
	},
	// sk-[A-Za-z0-9_-]{20,}: sk-, sk-proj-, sk-svcacct-, ...; with at
	// least one digit, so that words such as
	// "sk-learn-compatible-estimators" are not taken.
	{
		kind:  KindOpenAIKey,
		nextS: nextOpenAIKey[string], nextB: nextOpenAIKey[[]byte],
		match:     matchOpenAIKey,
		wordStart: true,
	},
	// Before bearer: "Bearer <jwt>" is masked as a jwt.
	{
		kind:  KindJWT,
		nextS: nextJWT[string], nextB: nextJWT[[]byte],
		match:     anchored(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`, 0),
		wordStart: true,
	},
	// (?i:bearer)\s+([A-Za-z0-9._~+/=-]{16,}): the token is masked and
	// "Bearer " kept. A token has a digit, so that prose ("bearer
	// token-based-authentication") is not taken.
	{
		kind:  KindBearer,
		nextS: nextBearer[string], nextB: nextBearer[[]byte],
		match:     matchBearer,
		wordStart: true,
	},
	// The credentials are masked and "Authorization: Basic " kept.
	{
		kind:  KindBasicAuth,
		nextS: nextBasicAuth[string], nextB: nextBasicAuth[[]byte],
		match:     anchored(`(?i:authorization)["']?\s*[:=]\s*["']?(?i:basic)\s+([A-Za-z0-9+/=]{8,})`, 1),
		wordStart: true,
	},
}

func init() {
	for _, p := range builtins {
		p.mask = maskFor(p.kind)
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

// The patterns whose matches are checked further are matched by hand, as
// FindStringSubmatchIndex allocates for each match.

func matchOpenAIKey(s string) (int, int, bool) {
	n := len("sk-")
	t := n + run(s[n:], isKeyByte)
	if t-n < 20 || !hasDigit(s[n:t]) {
		return 0, 0, false
	}
	return 0, t, true
}

func matchBearer(s string) (int, int, bool) {
	n := len("bearer")
	f := n + run(s[n:], isSpace)
	t := f + run(s[f:], isToken68Byte)
	if f == n || t-f < 16 || !hasDigit(s[f:t]) {
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

// The next functions return the first offset at or after from where the
// pattern's literal starts, or -1. They look for a rare byte of the
// literal with IndexByte and compare the rest there.

func nextPrivateKey[T text](s T, from int) int {
	for h := from; ; h++ {
		if h = indexLit(s, h, "-----BEGIN ", 5); h < 0 {
			return -1
		}
		if _, ok := pemLabel(s, h+len("-----BEGIN ")); ok {
			return h
		}
	}
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

func nextAWSAccessKey[T text](s T, from int) int {
	for h := from; ; h++ {
		if h = indexByteFrom(s, h, 'A'); h < 0 {
			return -1
		}
		if at(s, h, "AKIA") || at(s, h, "ASIA") || at(s, h, "ABIA") || at(s, h, "ACCA") || at(s, h, "A3T") {
			return h
		}
	}
}

// nextAWSSecretKey finds secret[_-]?access[_-]?key, in any case, from its
// "key".
func nextAWSSecretKey[T text](s T, from int) int {
	for k := from + len("secretaccess"); ; k++ {
		if k = indexFold(s, k, "key", 0); k < 0 {
			return -1
		}
		if h := secretAccessStart(s, k); h >= from {
			return h
		}
	}
}

// secretAccessStart returns where secret[_-]?access[_-]? ends at k starts,
// or -1.
func secretAccessStart[T text](s T, k int) int {
	for _, word := range [...]string{"access", "secret"} {
		if k > 0 && (s[k-1] == '_' || s[k-1] == '-') {
			k--
		}
		k -= len(word)
		if k < 0 || !atFold(s, k, word) {
			return -1
		}
	}
	return k
}

func nextGitHubToken[T text](s T, from int) int {
	for h := from; ; h++ {
		if h = indexByteFrom(s, h, 'g'); h < 0 {
			return -1
		}
		if h+4 <= len(s) && s[h+1] == 'h' && s[h+3] == '_' {
			switch s[h+2] {
			case 'p', 'o', 'u', 's', 'r':
				return h
			}
		}
		if at(s, h, "github_pat_") {
			return h
		}
	}
}

func nextGitLabToken[T text](s T, from int) int { return indexLit(s, from, "glpat-", 0) }

func nextSlackToken[T text](s T, from int) int {
	for h := from; ; h++ {
		if h = indexLit(s, h, "xox", 0); h < 0 {
			return -1
		}
		if h+5 <= len(s) && s[h+4] == '-' {
			switch s[h+3] {
			case 'a', 'b', 'p', 'o', 's', 'r':
				return h
			}
		}
	}
}

func nextSlackWebhook[T text](s T, from int) int {
	return indexLit(s, from, "https://hooks.slack.com/services/", 11)
}

func nextGoogleAPIKey[T text](s T, from int) int { return indexLit(s, from, "AIza", 2) }

// nextStripeKey finds sk_live_, sk_test_, rk_live_ and rk_test_ from their
// "k".
func nextStripeKey[T text](s T, from int) int {
	for k := from + 1; ; k++ {
		if k = indexByteFrom(s, k, 'k'); k < 0 {
			return -1
		}
		if (s[k-1] == 's' || s[k-1] == 'r') && (at(s, k+1, "_live_") || at(s, k+1, "_test_")) {
			return k - 1
		}
	}
}

func nextAnthropicKey[T text](s T, from int) int { return indexLit(s, from, "sk-ant-", 1) }

func nextOpenAIKey[T text](s T, from int) int { return indexLit(s, from, "sk-", 1) }

func nextJWT[T text](s T, from int) int { return indexLit(s, from, "eyJ", 2) }

func nextBearer[T text](s T, from int) int { return indexFold(s, from, "bearer", 0) }

func nextBasicAuth[T text](s T, from int) int { return indexFold(s, from, "authorization", 7) }

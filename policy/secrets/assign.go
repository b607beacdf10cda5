package secrets

import "strings"

// Secrets known by where they stand rather than by their shape: the value
// given to a secret-named setting (password=..., "token": "...",
// api_key: ...) and the password of a URL (postgres://user:pass@host).

// maxName bounds the setting name read back from a separator.
const maxName = 64

// secretWords are the endings of a setting's name that make its value a
// secret, lower case, without "_", "-" or "."; a name ends with one of them
// whatever comes before ("DB_PASSWORD", "clientSecret", "x-auth-token").
// "pwd" is not one: PWD is the working directory.
var secretWords = []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "secretkey", "privatekey"}

// notSecretTokens are names ending in "token" whose values are not
// secrets: the cursors of paginated APIs, MCP's progress tokens.
var notSecretTokens = []string{"pagetoken", "nexttoken", "continuationtoken", "synctoken", "cursortoken", "progresstoken"}

// isNameByte: a character of a setting's name, [A-Za-z0-9_.-].
func isNameByte(c byte) bool { return isWordByte(c) || c == '-' || c == '.' }

// secretName reports whether the name s[k:e] is a secret's: it ends with
// one of secretWords (in any case, "_", "-" and "." not counting) and is
// not one of notSecretTokens.
func secretName[T text](s T, k, e int) bool {
	// The last letters and digits of the name, lower case, backwards.
	var buf [24]byte
	n := 0
	for i := e - 1; i >= k && n < len(buf); i-- {
		c := s[i]
		if c == '_' || c == '-' || c == '.' {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	hasSuffix := func(w string) bool {
		if len(w) > n {
			return false
		}
		for j := range len(w) {
			if buf[j] != w[len(w)-1-j] {
				return false
			}
		}
		return true
	}
	for _, w := range secretWords {
		if hasSuffix(w) {
			for _, x := range notSecretTokens {
				if hasSuffix(x) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// lastByteOfWord marks the last letters of secretWords, in both cases: a
// name that ends otherwise is passed over at once.
var lastByteOfWord [256]bool

func init() {
	for _, w := range secretWords {
		c := w[len(w)-1]
		lastByteOfWord[c], lastByteOfWord[c-'a'+'A'] = true, true
	}
}

// wordTail reports whether a name's last three bytes, lower case, end one
// of secretWords: a quick look before secretName's.
func wordTail(a, b, c byte) bool {
	switch string([]byte{a, b, c}) {
	case "ord", "swd", "ase", "ret", "ken", "key":
		return true
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// checkAssignment is given a separator, "=" or ":", at i and finds the
// secret-named setting before it: a name, in quotes or not, then blanks
// (any number of them). It returns where the name (or its opening quote)
// starts, or -1; or, for a parameter of a URL's query string (an unquoted
// name right after "?", or after "&" with a "?" before it), where the "?"
// or "&" before the name is, so that matchAssignment knows the value ends
// at the next "&".
func checkAssignment[T text](s T, i int) int {
	if s[i] == '=' && i > 0 && s[i-1] == ':' {
		return -1 // ":=": its ":" is the separator
	}
	j := i
	for j > 0 {
		if s[j-1] == ' ' || s[j-1] == '\t' {
			j--
		} else if j > 1 && s[j-1] == 't' && s[j-2] == '\\' {
			j -= 2 // \t in JSON text, which the quick look reads undecoded
		} else {
			break
		}
	}
	var quote byte
	if j > 0 && (s[j-1] == '"' || s[j-1] == '\'') {
		quote = s[j-1]
		j--
		if j > 0 && s[j-1] == '\\' {
			// \" in JSON text, which the quick look reads undecoded;
			// the match, on the decoded string, reads no such name.
			j--
		}
	}
	if j < 3 || !lastByteOfWord[s[j-1]] || !wordTail(lower(s[j-3]), lower(s[j-2]), lower(s[j-1])) {
		return -1
	}
	// A longer name is read as its last maxName bytes: so is what is
	// left of it after a mask in it (masking again must find what the
	// first masking found).
	k := j
	for k > 0 && j-k < maxName && isNameByte(s[k-1]) {
		k--
	}
	if !secretName(s, k, j) {
		return -1
	}
	if quote != 0 {
		if k == 0 || s[k-1] != quote {
			return -1
		}
		k--
	} else if k > 0 && inQuery(s, k-1) {
		k--
	}
	return k
}

// maxQuery bounds how far back inQuery looks for a query string's "?".
const maxQuery = 4096

// inQuery reports whether the "?" or "&" that may be at i starts a
// parameter of a URL's query string: a "?", or an "&" after a "?" with no
// blank, quote or line end between them.
func inQuery[T text](s T, i int) bool {
	switch s[i] {
	case '?':
		return true
	case '&':
		for j := i - 1; j >= 0 && i-j <= maxQuery; j-- {
			switch s[j] {
			case '?':
				return true
			case ' ', '\t', '\n', '\r', '"', '\'':
				return false
			}
		}
	}
	return false
}

// matchAssignment matches a setting that checkAssignment found, s starting
// at its name (or at the "?" or "&" before a query parameter's name):
// name, separator (=, :, :=, =>), then its value, which is masked. A quoted
// value is masked up to its closing quote; an unquoted one up to a blank,
// a line end or a quote (the end of the string or of the quotes the
// setting is written in), or, in a URL's query string, an "&". What is not
// a secret's value is left: an empty value, true, false, null, an earlier
// mask, and what code puts there (a call, a variable: ${NAME}, $NAME,
// config.password; see plainValue).
func matchAssignment(s string) (int, int, bool) {
	i, query := 0, false
	if s[0] == '?' || s[0] == '&' {
		i, query = 1, true
	}
	if s[i] == '"' || s[i] == '\'' {
		i++
	}
	i += run(s[i:], isNameByte)
	if i < len(s) && (s[i] == '"' || s[i] == '\'') {
		i++
	}
	i += run(s[i:], isBlank)
	switch {
	case at(s, i, "=="):
		return 0, 0, false // a comparison
	case at(s, i, ":="), at(s, i, "=>"):
		i += 2
	case at(s, i, "="), at(s, i, ":"):
		i++
	default:
		return 0, 0, false
	}
	from, to, ok := assignedValue(s, i, query)
	if ok && s[i-1] == ':' && to > from && run(s[from:to], isTypeByte) == to-from {
		// A declaration with a type, password: str = "...": the value
		// is after the "=".
		if k := to + run(s[to:], isBlank); at(s, k, "=") && !at(s, k, "==") {
			from, to, ok = assignedValue(s, k+1, query)
		}
	}
	if !ok || to == from {
		return 0, to, false
	}
	return from, to, true
}

// assignedValue reads the value that starts after blanks at i: quoted, up
// to its closing quote on the same line (the quotes not in it), or not, up
// to a blank, a line end or a quote, or in a query string (query) an "&",
// and not a word of code (plainValue). When there is none, to says where
// the search goes on: at once (0), or after the first mask in a value,
// which was masked already or holds a secret of another kind that was
// (masking again leaves it), so that what follows the mask is read as the
// masking that made it read it.
func assignedValue(s string, i int, query bool) (from, to int, ok bool) {
	i += run(s[i:], isBlank)
	if i >= len(s) {
		return 0, 0, false
	}
	if q := s[i]; q == '"' || q == '\'' {
		to = i + 1
		for to < len(s) && s[to] != q && s[to] != '\n' {
			if s[to] == '[' && strings.HasPrefix(s[to:], maskStart) {
				return 0, maskEnd(s, to), false
			}
			to++
		}
		if to == len(s) || s[to] != q {
			return 0, 0, false
		}
		return i + 1, to, true
	}
	to = i
	for to < len(s) && isValueByte(s[to]) && !(query && s[to] == '&') {
		if s[to] == '[' && strings.HasPrefix(s[to:], maskStart) {
			return 0, maskEnd(s, to), false
		}
		to++
	}
	if !plainValue(s[i:to]) {
		// The name of another setting may end it ("a.clientSecret = ..."):
		// the search goes on at once.
		return 0, 0, false
	}
	return i, to, true
}

// maskStart is how a mask starts.
const maskStart = "[REDACTED"

// maskEnd returns the end of the mask that starts at i: after its "]", or
// after maskStart when no "]" follows closely.
func maskEnd(s string, i int) int {
	n := len(maskStart)
	if e := strings.IndexByte(s[i+n:min(len(s), i+n+64)], ']'); e >= 0 {
		return i + n + e + 1
	}
	return i + n
}

// isTypeByte: a character of a type's name, [A-Za-z0-9_.].
func isTypeByte(c byte) bool { return isWordByte(c) || c == '.' }

// isBlank: a space or a tab.
func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// isValueByte: a character of an unquoted value: not a blank, a control
// character or a quote.
func isValueByte(c byte) bool {
	return c > ' ' && c != 0x7f && c != '"' && c != '\''
}

// isClosing: punctuation that may follow a word of code in an unquoted
// value ("null,", "cfg.token;", "f(x))").
func isClosing(c byte) bool {
	switch c {
	case ',', ';', ')', ']', '}':
		return true
	}
	return false
}

// plainValue reports whether an unquoted value may be a secret rather than
// a word of the language the text is written in: true, null, None and the
// like, a variable ($NAME, ${NAME}), a template ({{ .Secret }},
// {{.Secret}}), an opening bracket alone ("password = {" starting an
// object), a call (os.Getenv(, getpass(), read_secret(path)) or a dotted
// path that names a secret or the environment (config.password,
// process.env.SECRET). Any other value is one, whatever punctuation is in
// it; so is one with a separator in it ("=" or ":"), which none of those
// holds, so that no value is read again from a separator in it.
func plainValue(v string) bool {
	if strings.IndexByte(v, '=') >= 0 || strings.IndexByte(v, ':') >= 0 {
		return true
	}
	// The word, without the punctuation code puts after it.
	w := v
	for len(w) > 0 && isClosing(w[len(w)-1]) {
		w = w[:len(w)-1]
	}
	switch w {
	case "", "true", "false", "null", "nil", "None", "undefined", "{", "(", "[":
		return false
	}
	if envReference(v) || w == "{{" || strings.HasPrefix(w, "{{") && strings.HasSuffix(v, "}}") {
		return false
	}
	p := identPath(w)
	switch {
	case p == len(w):
		// A dotted path: config.password, process.env.TOKEN; one that
		// names neither a secret nor the environment (correct.horse.battery)
		// is a secret.
		return !codePath(w)
	case w[p] == '(' && p > 0:
		// A call, its arguments a path, quoted (after the value's end)
		// or none: os.Getenv(, getpass(), read_secret(cfg.path)
		// (its closing parenthesis is cut off with the punctuation).
		if args := w[p+1:]; args == "" || identPath(args) == len(args) {
			return false
		}
	}
	return true
}

// identPath returns the length of the dotted path of identifiers that v
// starts with (config.auth.token): 0 when v does not start with one.
func identPath(v string) int {
	n := 0
	for {
		if n >= len(v) || !(isLetter(v[n]) || v[n] == '_' || v[n] == '$') {
			return max(n-1, 0) // the "." after the last identifier is not in the path
		}
		n += run(v[n:], isWordByte)
		if n >= len(v) || v[n] != '.' {
			return n
		}
		n++
	}
}

// codePath reports whether a dotted path of identifiers is code's: it has
// a "." and its last identifier names a secret, or it goes through the
// environment (process.env.X, os.environ.X).
func codePath(p string) bool {
	last := strings.LastIndexByte(p, '.')
	if last < 0 {
		return false
	}
	if secretName(p, last+1, len(p)) {
		return true
	}
	for rest := p[:last]; rest != ""; {
		seg := rest
		if d := strings.IndexByte(rest, '.'); d >= 0 {
			seg, rest = rest[:d], rest[d+1:]
		} else {
			rest = ""
		}
		if strings.EqualFold(seg, "env") || strings.EqualFold(seg, "environ") {
			return true
		}
	}
	return false
}

// envReference reports whether v names an environment variable, $NAME
// (upper case) or ${NAME}, then maybe the punctuation code puts after a
// word, rather than being a secret that starts with "$".
func envReference(v string) bool {
	if len(v) < 2 || v[0] != '$' {
		return false
	}
	if v[1] == '{' {
		n := 2 + run(v[2:], isWordByte)
		if n == 2 || n >= len(v) || v[n] != '}' {
			return false
		}
		return run(v[n+1:], isClosing) == len(v)-n-1
	}
	for len(v) > 2 && isClosing(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	for i := 1; i < len(v); i++ {
		if c := v[i]; !('A' <= c && c <= 'Z' || c == '_' || i > 1 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// checkURLPassword is given an "@" at i and finds the URL whose user
// information it ends: scheme://user:password@. It returns where the
// scheme starts, or -1.
func checkURLPassword[T text](s T, i int) int {
	// The user information: unreserved, percent-encoded and sub-delims
	// characters, and ":".
	k := i
	for k > 0 && i-k <= 256 && isUserInfoByte(s[k-1]) {
		k--
	}
	if k == i || !at(s, k-3, "://") {
		return -1
	}
	h := k - 3
	for h > 0 && k-h < 32 && isSchemeByte(s[h-1]) {
		h--
	}
	if h == k-3 || !isLetter(s[h]) || h > 0 && isWordByte(s[h-1]) {
		return -1
	}
	return h
}

// matchURLPassword matches, from a URL's scheme, its user information up
// to the last "@" before the host, and masks the password in it (after
// the first ":"). A user without a password is not masked.
func matchURLPassword(s string) (int, int, bool) {
	i := indexLit(s, 0, "://", 0) + 3
	end := i + run(s[i:], isUserInfoByte)
	for end < len(s) && s[end] == '@' {
		// An "@" in the password, not encoded: the last one ends it.
		next := end + 1 + run(s[end+1:], isUserInfoByte)
		if next >= len(s) || s[next] != '@' {
			break
		}
		end = next
	}
	if end >= len(s) || s[end] != '@' {
		return 0, 0, false
	}
	colon := indexByteFrom(s[:end], i, ':')
	if colon < 0 || colon+1 == end {
		return 0, 0, false
	}
	return colon + 1, end, true
}

// isUserInfoByte: a character of a URL's user information (RFC 3986):
// unreserved, "%", sub-delims, ":".
func isUserInfoByte(c byte) bool {
	if isWordByte(c) {
		return true
	}
	switch c {
	case '-', '.', '~', '%', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':':
		return true
	}
	return false
}

// isSchemeByte: a character of a URL's scheme, [A-Za-z0-9+.-].
func isSchemeByte(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

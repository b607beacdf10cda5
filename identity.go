package guard

// VerifiedEmail is the email an identity provider's claims (an ID token,
// userinfo, an access token, an introspection answer) make an identity:
// their "email" when "email_verified" is the boolean true, and "" otherwise.
// An email is an identity, matched by rules and recorded as who decided,
// so one the provider did not check (a user may type any address into
// their profile) names no one: not false, not a string such as "false" or
// "true" that some userinfo endpoints send, not a claim left out.
// trustMissing accepts an email whose claim is left out, for a provider
// that never sends it (Entra ID) and whose emails the configuration says
// to trust (trust_email: true).
func VerifiedEmail(claims map[string]any, trustMissing bool) string {
	email, _ := claims["email"].(string)
	v, present := claims["email_verified"]
	if email == "" || v != true && (present || !trustMissing) {
		return ""
	}
	return email
}

package auth

import (
	"encoding/json"
	"net/http"
	"strings"
)

// ResourceMetadata is an endpoint's Protected Resource Metadata (RFC 9728):
// what a client reads to find where to log in for it.
type ResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// MetadataPath is where the metadata of the endpoint at path (/mcp/NAME)
// is served: the well-known path with the endpoint's path inserted after
// it (RFC 9728 section 3.1), where MCP clients look first.
func MetadataPath(endpoint string) string {
	return "/.well-known/oauth-protected-resource" + endpoint
}

// Metadata returns the metadata of the endpoint whose URL is resource.
func (v *Verifier) Metadata(resource, name string) ResourceMetadata {
	return ResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   []string{v.cfg.Issuer},
		ScopesSupported:        v.cfg.Scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           name,
	}
}

// MetadataHandler serves the metadata of the endpoint whose URL is
// resource, to GET.
func (v *Verifier) MetadataHandler(resource, name string) http.Handler {
	b, _ := json.Marshal(v.Metadata(resource, name))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(b)
	})
}

// Challenge is the WWW-Authenticate header of a refusal at an endpoint
// whose metadata is at metadataURL: where to find it, the scopes to ask
// for and, when a token was refused, why (RFC 6750 section 3, RFC 9728
// section 5.1).
func (v *Verifier) Challenge(metadataURL string, e *Error) string {
	var params []string
	if e != nil && e.Code != "" && e.Code != "temporarily_unavailable" {
		params = append(params, `error="`+e.Code+`"`, `error_description="`+quotable(e.Description)+`"`)
	}
	params = append(params, `resource_metadata="`+quotable(metadataURL)+`"`)
	if len(v.cfg.Scopes) > 0 {
		params = append(params, `scope="`+quotable(strings.Join(v.cfg.Scopes, " "))+`"`)
	}
	return "Bearer " + strings.Join(params, ", ")
}

// quotable keeps what a quoted parameter of RFC 6750 may hold: printable
// ASCII but the double quote and the backslash.
func quotable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			if r == '"' {
				return '\''
			}
			return '?'
		}
		return r
	}, s)
}

// BearerToken returns the access token of a request's Authorization
// header ("" when it has none). The token is only ever read from the
// header: RFC 9728's bearer_methods_supported says so.
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") {
		return ""
	}
	return strings.TrimSpace(h[7:])
}

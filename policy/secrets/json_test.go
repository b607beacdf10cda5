package secrets_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonString writes s as a JSON string, as encoding/json does.
func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestMaskJSON(t *testing.T) {
	cases := []struct {
		name, in, want string
		n              int
	}{
		{
			name: "nested objects and arrays",
			in:   `{"a":{"b":[1,"x ` + awsAccessKey + ` y",{"c":"` + githubPAT + `"}]},"n":1.50e+3,"ok":true}`,
			want: `{"a":{"b":[1,"x ` + red("aws_access_key") + ` y",{"c":"` + red("github_token") + `"}]},"n":1.50e+3,"ok":true}`,
			n:    2,
		},
		{
			name: "private key with \\n escapes",
			in:   `{"path":"id_rsa","content":` + jsonString(rsaKey+"\n") + `,"size":1679}`,
			want: `{"path":"id_rsa","content":"` + red("private_key") + `\n","size":1679}`,
			n:    1,
		},
		{
			name: "spacing, order and numbers kept",
			in:   "{\n  \"z\" : 1E10 ,\n  \"token\" :\t\"" + slackBot + "\" ,\n  \"a\" : [ true , null , -0.0 ]\n}\n",
			want: "{\n  \"z\" : 1E10 ,\n  \"token\" :\t\"" + red("slack_token") + "\" ,\n  \"a\" : [ true , null , -0.0 ]\n}\n",
			n:    1,
		},
		{
			name: "\\/ escapes",
			in:   `{"url":"https:\/\/hooks.slack.com\/services\/T00000000\/B00000000\/XXXXXXXXXXXXXXXXXXXXXXXX"}`,
			want: `{"url":"` + red("slack_webhook") + `"}`,
			n:    1,
		},
		{
			name: "\\u escapes",
			in:   `["\u0041KIAIOSFODNN7EXAMPLE","sk\u005flive\u005f4eC39HqLyjWDarjtT1zdp7dc","\u002d----BEGIN PRIVATE KEY-----\u000aMIIE\u000a-----END PRIVATE KEY-----"]`,
			want: `["` + red("aws_access_key") + `","` + red("stripe_key") + `","` + red("private_key") + `"]`,
			n:    3,
		},
		{
			name: "a changed string keeps its other characters",
			in:   `{"s":"line\n\"q\"\t\u00e9\u2028\ud83d\ude00 \\ ` + googleKey + `\u0001"}`,
			want: `{"s":"line\n\"q\"\t` + "é" + `\u2028` + "😀" + ` \\ ` + red("google_api_key") + `\u0001"}`,
			n:    1,
		},
		{
			name: "a string that did not change keeps its escapes",
			in:   `{"a":"caf\u00e9 \/ \u0041BC","b":"` + jwt + `"}`,
			want: `{"a":"caf\u00e9 \/ \u0041BC","b":"` + red("jwt") + `"}`,
			n:    1,
		},
		{
			name: "member names are not masked",
			in:   `{"` + awsAccessKey + `":"` + awsAccessKey + `"}`,
			want: `{"` + awsAccessKey + `":"` + red("aws_access_key") + `"}`,
			n:    1,
		},
		{
			name: "aws secret key by member name",
			in:   `{"Credentials":{"AccessKeyId":"` + awsAccessKey + `","SecretAccessKey":"` + awsSecretKey + `"},"aws_secret_access_key":` + jsonString(awsSecretKey) + `,"other":"` + awsSecretKey + `"}`,
			want: `{"Credentials":{"AccessKeyId":"` + red("aws_access_key") + `","SecretAccessKey":"` + red("aws_secret_key") + `"},"aws_secret_access_key":"` + red("aws_secret_key") + `","other":"` + awsSecretKey + `"}`,
			n:    3,
		},
		{
			name: "authorization by member name",
			in:   `{"headers":{"Authorization":"Basic dXNlcjpwYXNzd29yZA==","proxy-authorization":"Bearer abcdefghijklmnop","X":"Basic dXNlcjpwYXNzd29yZA=="}}`,
			want: `{"headers":{"Authorization":"Basic ` + red("basic_auth") + `","proxy-authorization":"Bearer ` + red("bearer") + `","X":"Basic dXNlcjpwYXNzd29yZA=="}}`,
			n:    2,
		},
		{
			name: "member name with escapes",
			in:   `{"Author\u0069zation":"Basic dXNlcjpwYXNzd29yZA=="}`,
			want: `{"Author\u0069zation":"Basic ` + red("basic_auth") + `"}`,
			n:    1,
		},
		{
			name: "JSON inside a string",
			in:   `{"content":[{"type":"text","text":"{\"api_key\":\"` + openAIKey + `\",\"aws_secret_access_key\":\"` + awsSecretKey + `\"}"}]}`,
			want: `{"content":[{"type":"text","text":"{\"api_key\":\"` + red("openai_key") + `\",\"aws_secret_access_key\":\"` + red("aws_secret_key") + `\"}"}]}`,
			n:    2,
		},
		{
			name: "top-level string",
			in:   ` "Bearer ` + anthropicKey + `" `,
			want: ` "Bearer ` + red("anthropic_key") + `" `,
			n:    1,
		},
		{
			name: "not JSON: masked as text",
			in:   `{"a": "` + awsAccessKey + `", "b": ` + githubPAT,
			want: `{"a": "` + red("aws_access_key") + `", "b": ` + red("github_token"),
			n:    2,
		},
		{
			name: "not JSON until masked",
			in:   "[\"-----BEGIN PRIVATE KEY-----\x01-----END PRIVATE KEY-----\",\"\\u0041KIAIOSFODNN7EXAMPLE\"]",
			want: `["` + red("private_key") + `","` + red("aws_access_key") + `"]`,
			n:    2,
		},
	}
	m := masker(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, n := m.MaskJSON([]byte(c.in))
			if string(got) != c.want || n != c.n {
				t.Errorf("MaskJSON(%s)\n = %s, %d\nwant %s, %d", c.in, got, n, c.want, c.n)
			}
			if json.Valid([]byte(c.in)) && !json.Valid(got) {
				t.Errorf("output is not valid JSON: %s", got)
			}
			again, n := m.MaskJSON(got)
			if string(again) != string(got) || n != 0 {
				t.Errorf("masking again = %s, %d", again, n)
			}
		})
	}
}

// Text with no secret is returned itself, the same bytes.
func TestMaskJSONUnchanged(t *testing.T) {
	m := masker(t)
	for _, in := range []string{
		cleanArgs,
		`{"a":"caf\u00e9 \/ \u0041BC \"x\"","b":[1,2,{"c":null}]}`,
		`{"success":true,"high":"gh","key":"bearer of news","authorization":"none"}`,
		`{"aws_secret_access_key":"not-a-key"}`,
		`{"a": broken`,
		``,
	} {
		doc := []byte(in)
		got, n := m.MaskJSON(doc)
		if n != 0 || len(got) != len(doc) || len(doc) > 0 && &got[0] != &doc[0] {
			t.Errorf("MaskJSON(%s) = %s, %d; want the same slice", in, got, n)
		}
	}
}

// The Python json module writes non-ASCII and some ASCII as \u escapes.
func TestMaskJSONAllEscaped(t *testing.T) {
	var b strings.Builder
	for _, r := range `{"k":"token ` + githubPAT + `"}` {
		if r == '"' || r == '{' || r == '}' || r == ':' {
			b.WriteRune(r)
			continue
		}
		b.WriteString(`\u00`)
		b.WriteString("0123456789abcdef"[r>>4 : r>>4+1])
		b.WriteString("0123456789abcdef"[r&15 : r&15+1])
	}
	// Member name and value both escaped from end to end.
	in := b.String()
	if !json.Valid([]byte(in)) {
		t.Fatalf("bad test input %s", in)
	}
	got, n := masker(t).MaskJSON([]byte(in))
	if want := `{"\u006b":"token ` + red("github_token") + `"}`; n != 1 || string(got) != want {
		t.Errorf("MaskJSON(%s) = %s, %d; want %s, 1", in, got, n, want)
	}
}

// A typical arguments object with no secret.
var cleanArgs = `{"path":"/home/dev/project/src/server/handlers.go","content":"package server\n\nimport (\n\t\"fmt\"\n\t\"net/http\"\n)\n\n// Handle answers a request.\nfunc Handle(w http.ResponseWriter, r *http.Request) {\n\tfmt.Fprintf(w, \"hello %s\", r.URL.Path)\n}\n","options":{"recursive":true,"maxDepth":3,"include":["*.go","*.md"],"exclude":["vendor/**"]},"query":"find every caller of Handle in the repository and list the highest-risk ones","requestId":"123e4567-e89b-12d3-a456-426614174000","limit":50}`

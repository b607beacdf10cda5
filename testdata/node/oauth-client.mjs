// An MCP client on the official TypeScript SDK that logs in by itself, as
// the MCP authorization specification has it: the server's 401 names its
// Protected Resource Metadata, which names the authorization server; the
// SDK reads both, starts authorization code with PKCE (and the resource
// indicator) as a pre-registered client, and this script plays the
// browser: it follows the redirects, logging in as --user (login_hint),
// until the redirect URI receives the code. Then it connects again with the
// token, lists the tools, calls one and prints a JSON transcript.
//
//   node oauth-client.mjs --url URL --client-id ID [--client-secret S]
//        --redirect URI --user SUBJECT --tool NAME --args JSON
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const flags = { url: "", "client-id": "", "client-secret": "", redirect: "", user: "", tool: "", args: "{}" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const name = argv[i].replace(/^--?/, "");
  if (!(name in flags) || i + 1 >= argv.length) {
    console.error("usage: node oauth-client.mjs --url URL --client-id ID [--client-secret S] --redirect URI --user SUBJECT --tool NAME --args JSON");
    process.exit(2);
  }
  flags[name] = argv[i + 1];
}

const out = { fetched: [], authorization: null, tools: [], call: null, statuses: [] };

// Every request the SDK makes (to guard, and for discovery and tokens),
// by path: the transcript shows how it found its way.
const fetchLogged = async (url, init) => {
  const res = await fetch(url, init);
  const u = new URL(String(url));
  out.fetched.push(`${init?.method || "GET"} ${u.pathname} ${res.status}`);
  return res;
};

let authorizationCode;
const provider = {
  _tokens: undefined,
  _verifier: undefined,
  _info: { client_id: flags["client-id"], ...(flags["client-secret"] ? { client_secret: flags["client-secret"] } : {}) },
  get redirectUrl() {
    return flags.redirect;
  },
  get clientMetadata() {
    return { client_name: "guard oauth test", redirect_uris: [flags.redirect], grant_types: ["authorization_code"], response_types: ["code"] };
  },
  clientInformation() {
    return this._info;
  },
  saveClientInformation(info) {
    this._info = info;
  },
  tokens() {
    return this._tokens;
  },
  saveTokens(t) {
    this._tokens = t;
  },
  saveCodeVerifier(v) {
    this._verifier = v;
  },
  codeVerifier() {
    return this._verifier;
  },
  // The browser's part: follow the redirects, the provider's login page
  // told who logs in by login_hint, until the redirect URI.
  async redirectToAuthorization(authorizationUrl) {
    const u = new URL(authorizationUrl);
    out.authorization = {
      resource: u.searchParams.get("resource"),
      scope: u.searchParams.get("scope"),
      code_challenge_method: u.searchParams.get("code_challenge_method"),
    };
    u.searchParams.set("login_hint", flags.user);
    let next = u.toString();
    for (let i = 0; i < 10; i++) {
      const res = await fetch(next, { redirect: "manual" });
      const loc = res.headers.get("location");
      if (!loc) throw new Error(`${next} answered ${res.status} without a redirect: ${await res.text()}`);
      const to = new URL(loc, next);
      if (to.toString().startsWith(flags.redirect)) {
        if (to.searchParams.get("error")) throw new Error(`authorization refused: ${to.searchParams.get("error")}: ${to.searchParams.get("error_description")}`);
        authorizationCode = to.searchParams.get("code");
        return;
      }
      next = to.toString();
    }
    throw new Error("too many redirects");
  },
};

const connect = async () => {
  const transport = new StreamableHTTPClientTransport(new URL(flags.url), { authProvider: provider, fetch: fetchLogged });
  const client = new Client({ name: "guard-oauth-client", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};

let session;
try {
  session = await connect();
} catch (e) {
  if (!(e instanceof UnauthorizedError) || !authorizationCode) throw e;
  // The code came back: exchange it, and connect again with the token.
  const transport = new StreamableHTTPClientTransport(new URL(flags.url), { authProvider: provider, fetch: fetchLogged });
  await transport.finishAuth(authorizationCode);
  session = await connect();
}
const { client } = session;
const listed = await client.listTools();
out.tools = listed.tools.map((t) => t.name).sort();
if (flags.tool) {
  const res = await client.callTool({ name: flags.tool, arguments: JSON.parse(flags.args) });
  out.call = { isError: !!res.isError, text: (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n") };
}
out.tokenType = provider._tokens?.token_type ?? null;
await client.close();
console.log(JSON.stringify(out));

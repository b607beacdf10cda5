// A scripted MCP client on the official TypeScript SDK. It starts the
// server command given after "--", runs a scenario against it, and prints a
// JSON transcript of what it saw, with values that change from run to run
// left out, so that a run through guard can be compared with a direct one.
//
//   node client.mjs [--scenario auto|everything|example] [--protocol VERSION] -- COMMAND [ARGS...]
//   node client.mjs [--scenario ...] --url URL      (Streamable HTTP)
//   node client.mjs [--scenario ...] --sse URL      (the legacy HTTP+SSE transport)
//
// --prefix P keeps only the tools and prompts named P..., records them
// without P and calls them with it (guard serve's aggregate endpoint names
// them SERVER__NAME).
//
// --scenario everything calls server-everything's tools, example calls guard's
// example server's; auto (the default) chooses by the tools listed.
// --protocol offers VERSION in initialize instead of the SDK's latest (the
// SDK has no option for it, so the initialize request is rewritten on its
// way out); the transcript names the version the server chose.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const argv = process.argv.slice(2);
let sep = argv.indexOf("--");
if (sep < 0) sep = argv.length;
const usage = "usage: node client.mjs [--scenario auto|everything|example] [--protocol VERSION] [--prefix P] (-- COMMAND [ARGS...] | --url URL | --sse URL)";
const flags = { scenario: "auto", protocol: "", url: "", sse: "", prefix: "" };
for (let i = 0; i < sep; i += 2) {
  const name = argv[i].replace(/^--?/, "");
  if (!(name in flags) || i + 1 >= sep) {
    console.error(usage);
    process.exit(2);
  }
  flags[name] = argv[i + 1];
}
const command = argv.slice(sep + 1);
if (!["auto", "everything", "example"].includes(flags.scenario) || (command.length === 0 && !flags.url && !flags.sse)) {
  console.error(usage);
  process.exit(2);
}

const transport = flags.url
  ? new StreamableHTTPClientTransport(new URL(flags.url))
  : flags.sse
    ? new SSEClientTransport(new URL(flags.sse))
    : new StdioClientTransport({ command: command[0], args: command.slice(1), env: process.env, stderr: "inherit" });
const out = { server: null, protocol: null, tools: [], calls: {}, resources: 0, prompts: [], ping: false };
if (flags.protocol) {
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message.method === "initialize") {
      message = { ...message, params: { ...message.params, protocolVersion: flags.protocol } };
    }
    return send(message, options);
  };
}
// The client tells the transport the negotiated version after initialize.
transport.setProtocolVersion = (v) => {
  out.protocol = v;
};
const client = new Client(
  { name: "guard-ts-client", version: "1.0.0" },
  { capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } } },
);

const seen = { sampling: 0, elicitation: 0, roots: 0, logs: 0 };
client.setRequestHandler(CreateMessageRequestSchema, async () => {
  seen.sampling++;
  return { role: "assistant", content: { type: "text", text: "canned sample" }, model: "test-model", stopReason: "endTurn" };
});
client.setRequestHandler(ElicitRequestSchema, async () => {
  seen.elicitation++;
  return { action: "accept", content: { name: "Ada", email: "ada@example.com", age: 36, color: "red", checked: true } };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  seen.roots++;
  return { roots: [{ uri: "file:///tmp/guard-test-root", name: "test root" }] };
});
client.setNotificationHandler(LoggingMessageNotificationSchema, () => {
  seen.logs++;
});

function textOf(result) {
  return (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

await client.connect(transport);
out.server = client.getServerVersion()?.name ?? null;

let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  for (const t of page.tools) if (t.name.startsWith(flags.prefix)) out.tools.push(t.name.slice(flags.prefix.length));
  cursor = page.nextCursor;
} while (cursor);
out.tools.sort();

// call records a tool call under label (default: the tool's name).
async function call(name, args, opts, label) {
  if (!out.tools.includes(name)) return;
  label = label || name;
  try {
    const res = await client.callTool({ name: flags.prefix + name, arguments: args }, undefined, opts);
    out.calls[label] = { isError: !!res.isError, text: textOf(res), structured: res.structuredContent ?? null };
  } catch (e) {
    out.calls[label] = { error: String(e.message || e) };
  }
}

let progress = 0;
const onprogress = () => progress++;
let scenario = flags.scenario;
if (scenario === "auto") scenario = out.tools.includes("get-sum") ? "everything" : "example";
out.scenario = scenario;
if (scenario === "everything") {
  await call("echo", { message: "hello through guard" });
  await call("get-sum", { a: 2, b: 40 });
  await call("get-structured-content", { location: "New York" });
  // The weather it reports is random: keep the shape only.
  if (out.calls["get-structured-content"]?.structured) {
    const s = out.calls["get-structured-content"];
    s.structured = Object.keys(s.structured).sort();
    s.text = "";
  }
  await call("trigger-long-running-operation", { duration: 1, steps: 3 }, { onprogress });
  await call("trigger-sampling-request", { prompt: "say hi", maxTokens: 10 });
  await call("trigger-elicitation-request", {});
  await call("get-roots-list", {});
} else {
  // guard's example server logs the start and end of run_task once a level
  // is set: those notifications are counted.
  await client.setLoggingLevel("info");
  await call("echo", { text: "hello through guard", times: 2 });
  await call("list_notes", {});
  await call("write_note", { title: "plan", body: "ship it" });
  await call("read_note", { title: "plan" });
  await call("send_message", { to: "ops@example.com", message: "shipped" });
  await call("run_task", { task: "tidy", seconds: 1 }, { onprogress });
  await call("note_stats", {});
  await call("delete_note", { title: "plan" });
  await call("read_note", { title: "plan" }, undefined, "read_note after delete_note");
  await call("write_note", { title: "no body" }, undefined, "write_note without body");
}
out.progress = progress > 0;

try {
  const r = await client.listResources();
  out.resources = r.resources.length;
  if (r.resources.length > 0) {
    const read = await client.readResource({ uri: r.resources[0].uri });
    out.readResource = read.contents.length;
  }
} catch (e) {
  out.resources = "error: " + e.message;
}
try {
  const p = await client.listPrompts();
  const mine = p.prompts.filter((x) => x.name.startsWith(flags.prefix));
  out.prompts = mine.map((x) => x.name.slice(flags.prefix.length)).sort();
  const simple = mine.find((x) => !x.arguments || x.arguments.every((a) => !a.required));
  if (simple) {
    const got = await client.getPrompt({ name: simple.name });
    out.getPrompt = got.messages.length;
  }
} catch (e) {
  out.prompts = "error: " + e.message;
}
try {
  await client.setLoggingLevel("debug");
  out.logging = true;
} catch (e) {
  out.logging = "error: " + e.message;
}
await client.ping();
out.ping = true;
out.seen = { sampling: seen.sampling > 0, elicitation: seen.elicitation > 0, roots: seen.roots > 0 };
// server-everything logs at random intervals: only the example's count is fixed.
if (scenario === "example") out.seen.logs = seen.logs;
await client.close();
process.stdout.write(JSON.stringify(out, null, 1) + "\n");

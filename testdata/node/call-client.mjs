// An MCP client on the official TypeScript SDK that makes one tool call and
// waits for its answer, for as long as it takes: the shape of an assistant
// whose call guard holds. It prints one JSON line per step, "listed" once it
// has listed the tools (with their names and descriptions), then "result"
// with the call's result, so that a test can kill it while it waits, or read
// what its model would have read.
//
//   node call-client.mjs --tool NAME --args JSON [--list-only] -- COMMAND [ARGS...]
//   node call-client.mjs --tool NAME --args JSON --url URL      (Streamable HTTP)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const argv = process.argv.slice(2);
let sep = argv.indexOf("--");
if (sep < 0) sep = argv.length;
const flags = { tool: "", args: "{}", url: "", "list-only": false };
for (let i = 0; i < sep; i++) {
  const name = argv[i].replace(/^--?/, "");
  if (name === "list-only") {
    flags[name] = true;
    continue;
  }
  if (!(name in flags) || i + 1 >= sep) {
    console.error("usage: node call-client.mjs --tool NAME --args JSON [--list-only] (-- COMMAND [ARGS...] | --url URL)");
    process.exit(2);
  }
  flags[name] = argv[++i];
}
const command = argv.slice(sep + 1);
const transport = flags.url
  ? new StreamableHTTPClientTransport(new URL(flags.url))
  : new StdioClientTransport({ command: command[0], args: command.slice(1), env: process.env, stderr: "inherit" });
const client = new Client({ name: "guard-call-client", version: "1.0.0" }, { capabilities: {} });
const print = (o) => process.stdout.write(JSON.stringify(o) + "\n");

async function list() {
  const { tools } = await client.listTools();
  print({ step: "listed", tools: tools.map((t) => ({ name: t.name, description: t.description ?? "", annotations: t.annotations ?? {} })) });
}

client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
  print({ step: "list_changed" });
  await list();
});
await client.connect(transport);
await list();
if (flags["list-only"]) {
  // Wait for list changes until the test ends this process.
  await new Promise(() => {});
}
const result = await client.callTool({ name: flags.tool, arguments: JSON.parse(flags.args) }, undefined, {
  timeout: 3_600_000,
  resetTimeoutOnProgress: true,
});
print({ step: "result", result });
await client.close();

// The official ACP TypeScript SDK (@agentclientprotocol/sdk) as a client of `e2b acp`, with fs
// and terminal handlers registered and the capabilities advertised. Prints one JSON line:
// {"calls": [methods that reached a handler], "meta": session/new's _meta}.
//
// usage: node ts_client.mjs SDK_DIR E2B_BIN AGENT_CMD
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [sdkDir, e2bBin, agentCmd] = process.argv.slice(2);
const entry = createRequire(join(sdkDir, "package.json")).resolve("@agentclientprotocol/sdk");
const acp = await import(pathToFileURL(entry).href);

const child = spawn(e2bBin, ["acp", "--", agentCmd], { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const calls = [];
const record = (method, answer) => () => {
  calls.push(method);
  return answer;
};
const app = acp
  .client()
  .onRequest("fs/read_text_file", record("fs/read_text_file", { content: "SECRET" }))
  .onRequest("fs/write_text_file", record("fs/write_text_file", {}))
  .onRequest("terminal/create", record("terminal/create", { terminalId: "t1" }))
  .onRequest("session/request_permission", record("session/request_permission", {
    outcome: { outcome: "cancelled" },
  }))
  .onNotification("session/update", () => {});

const timer = setTimeout(() => {
  console.error("ts_client: no answer within 60 s");
  child.kill("SIGKILL");
  process.exit(2);
}, 60_000);
const session = await app.connectWith(stream, async (agent) => {
  await agent.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
  });
  return await agent.request("session/new", { cwd: "/tmp", mcpServers: [] });
});
child.stdin.end();
await new Promise((resolve) => child.once("exit", resolve));
clearTimeout(timer);
console.log(JSON.stringify({ calls, meta: session._meta ?? null }));

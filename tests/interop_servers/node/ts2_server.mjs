// Interop test server on the official TypeScript SDK 2.x (npm @modelcontextprotocol/server, pinned in package.json).
// It serves stdio through serveStdio(), the SDK's dual-era entry that @bytebase/dbhub uses: the opening exchange
// picks the era, and a late server/discover is answered even when an initialize follows it. It stands in for dbhub
// (which needs Node.js >= 22.5 for node:sqlite; docs/interop.md) and, like dbhub connecting its database first,
// can start slowly:  node ts2_server.mjs [--delay SECONDS]  (stdin is not read before the delay is over).
import { McpServer, fromJsonSchema } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";

const at = process.argv.indexOf("--delay");
const delayMs = at > 0 ? Math.round(Number(process.argv[at + 1]) * 1000) : 0;

function createServer() {
  const server = new McpServer({ name: "bkmcp-interop-ts2", version: "2.4.0-interop" }, { capabilities: { tools: {} } });
  server.registerTool(
    "add",
    {
      description: "Add two integers.",
      inputSchema: fromJsonSchema({
        type: "object",
        properties: { a: { type: "integer" }, b: { type: "integer" } },
        required: ["a", "b"],
      }),
    },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
  );
  server.registerTool(
    "label",
    {
      description: "Label an item: a string, an enum and a boolean.",
      inputSchema: fromJsonSchema({
        type: "object",
        properties: {
          name: { type: "string" },
          size: { type: "string", enum: ["small", "large"] },
          loud: { type: "boolean" },
        },
        required: ["name", "size"],
      }),
    },
    async ({ name, size, loud }) => {
      const text = `${name} (${size})`;
      return { content: [{ type: "text", text: loud ? text.toUpperCase() : text }] };
    },
  );
  return server;
}

async function main() {
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  serveStdio(createServer);
  console.error("ts2_server: serving on stdio");
}

main();

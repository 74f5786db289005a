// Interop test server on the official TypeScript SDK 2.x (npm @modelcontextprotocol/server, pinned in package.json).
// It serves stdio through serveStdio(), the SDK's dual-era entry that @bytebase/dbhub uses: the opening exchange
// picks the era, and a late server/discover is answered even when an initialize follows it. It stands in for dbhub
// (which needs Node.js >= 22.5 for node:sqlite; docs/interop.md). The tests make it slow to start with
// wire_tap.py --delay (nothing reads its stdin meanwhile, as when dbhub connects its database first).
import { McpServer, fromJsonSchema } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";

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

serveStdio(createServer);
console.error("ts2_server: serving on stdio");

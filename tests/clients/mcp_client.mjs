// A second MCP client for the endpoint's tests: the official TypeScript SDK's Client over Streamable HTTP, run by
// scripts/mcp-ts-client (which installs the pinned SDK and names its folder in MCP_TS_SDK):
//
//   MCP_TOKEN=... scripts/mcp-ts-client URL
//
// Connects (initialize), lists the tools, calls search, retrieve, list_knowledge_bases and fetch of the first search
// result, and prints one JSON object on stdout: {protocolVersion, tools, search, retrieve, bases, fetch: {isError,
// structuredContent}}. Any error (transport, JSON-RPC, a tool answering isError other than fetch) exits 1 with the
// error on stderr. The token is read from the environment, never from the command line.

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const QUERY = "alpha";

function sdkModule(sdk, file) {
  // The SDK lives in its own install, outside this file's node_modules lookup: imported by its file's path.
  return import(pathToFileURL(join(sdk, "dist", "esm", ...file.split("/"))).href);
}

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) {
    throw new Error(`${name} answered isError: ${JSON.stringify(result.content)}`);
  }
  return result.structuredContent;
}

async function main() {
  const [url] = process.argv.slice(2);
  const token = process.env.MCP_TOKEN;
  const sdk = process.env.MCP_TS_SDK;
  if (!url || !token || !sdk) {
    throw new Error("usage: MCP_TOKEN=... MCP_TS_SDK=<the SDK's folder> node mcp_client.mjs URL");
  }
  const { Client } = await sdkModule(sdk, "client/index.js");
  const { StreamableHTTPClientTransport } = await sdkModule(sdk, "client/streamableHttp.js");
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "es-provider-ts-client", version: "1.0.0" });
  await client.connect(transport); // sends initialize and notifications/initialized
  try {
    const { tools } = await client.listTools();
    const search = await call(client, "search", { query: QUERY });
    const retrieve = await call(client, "retrieve", { query: QUERY, top_k: 20 });
    const bases = await call(client, "list_knowledge_bases", {});
    const first = search?.results?.[0];
    if (!first) {
      throw new Error(`search found nothing to fetch: ${JSON.stringify(search)}`);
    }
    // fetch may answer isError (a refusal is a tool result, not a protocol error): reported, not thrown.
    const fetched = await client.callTool({ name: "fetch", arguments: { id: first.id } });
    const answer = {
      protocolVersion: transport.protocolVersion,
      tools: tools.map((tool) => tool.name),
      search,
      retrieve,
      bases,
      fetch: { isError: Boolean(fetched.isError), structuredContent: fetched.structuredContent },
    };
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  process.stderr.write(`mcp_client: ${error?.stack ?? error}\n`);
  process.exit(1);
});

// Drives the example MCP server with the official TypeScript SDK client.
//
// usage: node client.mjs SERVER_BINARY (stdio|http) URL
//
// Prints one line per check and the revision negotiated; exits non-zero on
// any failure.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, LoggingMessageNotificationSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { readFileSync } from 'node:fs';

const [binary, transportName, url] = process.argv.slice(2);
const failures = [];
const check = (name, ok, detail) => {
  console.log(`  ${ok ? 'ok ' : 'FAIL'} ${name}${!ok && detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
  if (!ok) failures.push(name);
};
const equal = (a, b) => JSON.stringify(a) === JSON.stringify(b);

async function expectError(promise) {
  try {
    const result = await promise;
    return { result };
  } catch (e) {
    return { code: e instanceof McpError ? e.code : undefined, data: e.data, error: e };
  }
}

const version = JSON.parse(readFileSync(new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url))).version;
const transport = transportName === 'stdio'
  ? new StdioClientTransport({ command: binary, args: [], stderr: 'inherit' })
  : new StreamableHTTPClientTransport(new URL(url));
let negotiated;
const setVersion = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (v) => { negotiated = v; setVersion?.(v); };

const client = new Client({ name: 'rpcwire-interop', version: '1.0.0' }, { capabilities: { sampling: {} } });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params); });
// The question the client's model takes far longer to answer than the
// tool waits for it; what became of that handler (its start, and how and
// when it ended: 'aborted' with the signal's reason, or 'answered').
const SLOW_QUESTION = 'a slow question';
const SLOW_MODEL_MS = 10000;
const CANCEL_BOUND_MS = 5000;
const slow = {};
let slowDone;
const slowEnded = new Promise((resolve) => { slowDone = resolve; });
// The client's "model" for sampling: echoes the question it was asked.
const samples = [];
client.setRequestHandler(CreateMessageRequestSchema, (request, extra) => {
  const question = request.params.messages[0].content.text;
  if (question === SLOW_QUESTION) {
    // The server gives up and sends notifications/cancelled; the SDK
    // aborts this handler's signal (and drops whatever it returns).
    slow.started = Date.now();
    return new Promise((resolve, reject) => {
      const end = (outcome) => { slow.outcome = outcome; slow.ended = Date.now(); slowDone(); };
      const timer = setTimeout(() => {
        end('answered');
        resolve({ role: 'assistant', content: { type: 'text', text: 'too late' }, model: 'interop-model', stopReason: 'endTurn' });
      }, SLOW_MODEL_MS);
      extra.signal.addEventListener('abort', () => {
        clearTimeout(timer);
        slow.reason = extra.signal.reason;
        end('aborted');
        reject(new Error('the server cancelled the request'));
      }, { once: true });
    });
  }
  samples.push(question);
  return { role: 'assistant', content: { type: 'text', text: `echo: ${question}` }, model: 'interop-model', stopReason: 'endTurn' };
});
await client.connect(transport);
console.log(`typescript @modelcontextprotocol/sdk ${version} client, transport=${transportName}: negotiated protocol revision ${negotiated}`);
check('revision', negotiated === '2025-11-25', negotiated);

const { tools } = await client.listTools();
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
check('tools listed', ['build-app', 'lint-check', 'wait'].every((n) => n in byName), Object.keys(byName));
const schema = byName['build-app'].inputSchema;
check('build-app schema: required', equal([...schema.required].sort(), ['arch', 'project_dir']), schema);
check('build-app schema: arch enum', equal(schema.properties.arch.enum, ['arm64', 'x86_64']), schema);
check('build-app schema: configuration enum', equal(schema.properties.configuration.enum, ['Debug', 'Release']), schema);
check('build-app outputSchema', byName['build-app'].outputSchema?.type === 'object');

// Good arguments, with progress (the client validates structuredContent
// against the outputSchema itself).
const progress = [];
const good = await client.callTool(
  { name: 'build-app', arguments: { project_dir: '/tmp/app', configuration: 'Release', arch: 'x86_64' } },
  undefined,
  { onprogress: (p) => progress.push(p.progress) },
);
check('build-app result', !good.isError && good.structuredContent?.status === 'ok' && good.structuredContent?.arch === 'x86_64', good);
check('progress received', progress.length >= 1, progress);
check('progress increasing', progress.every((p, i) => i === 0 || progress[i - 1] < p), progress);
console.log(`    progress seen: ${JSON.stringify(progress)}; log messages seen: ${logs.length}`);
check('log messages received', logs.length >= 1, logs);

// Log level filtering: after logging/setLevel error, no info/debug messages.
await client.setLoggingLevel('error');
const before = logs.length;
await client.callTool({ name: 'build-app', arguments: { project_dir: '/tmp/app', arch: 'arm64' } });
check('logging/setLevel filters', logs.length === before, logs.slice(before));

// Arguments that break the schema: from 2025-11-25 (SEP-1303) a tool result
// with isError whose text names what to correct.
let bad = await client.callTool({ name: 'build-app', arguments: { project_dir: '/tmp/app', arch: 'ARM' } });
let text = bad.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
console.log(`    arch=ARM -> isError ${bad.isError}, text ${JSON.stringify(text)}`);
check('arch=ARM is a tool error', bad.isError === true && bad.structuredContent === undefined, bad);
check('arch=ARM names the field and the choices',
  text.endsWith('{"field":"arch","expected":["arm64","x86_64"],"received":"ARM"}'), text);

// Missing project_dir.
bad = await client.callTool({ name: 'build-app', arguments: { arch: 'arm64' } });
text = bad.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
console.log(`    no project_dir -> isError ${bad.isError}, text ${JSON.stringify(text)}`);
check('missing project_dir is a tool error', bad.isError === true, bad);
check('missing project_dir names the field', text.includes("missing required property 'project_dir'"), text);

// Unknown tool.
let r = await expectError(client.callTool({ name: 'no-such-tool', arguments: {} }));
console.log(`    unknown tool -> code ${r.code}, data ${JSON.stringify(r.data)}`);
check('unknown tool is -32602', r.code === -32602, r);

// lint-check.
const lint = await client.callTool({ name: 'lint-check', arguments: {} });
check('lint-check', !lint.isError && lint.structuredContent?.files > 0, lint);
console.log(`    lint-check: ${lint.structuredContent?.files} files, ${lint.structuredContent?.lines} lines, ${lint.structuredContent?.trailing_whitespace} trailing`);

// Cancel a slow call (notifications/cancelled).
const controller = new AbortController();
const started = Date.now();
setTimeout(() => controller.abort('test cancels'), 300);
r = await expectError(client.callTool({ name: 'wait', arguments: { ms: 20000 } }, undefined, { signal: controller.signal }));
check('slow call cancelled', r.error !== undefined && Date.now() - started < 5000, r);
const after = await client.callTool({ name: 'wait', arguments: { ms: 10 } });
check('served after cancel', !after.isError, after);
// The server stopped the cancelled call (the client only knows it gave
// up): soon no other wait runs (the SDK sends its cancellation without
// waiting, so it may reach the server after the next call; the 20 s wait
// would run on).
let stopped = after;
for (let i = 0; i < 40 && !stopped.content?.[0]?.text?.includes('(0 other waits running)'); i++) {
    await new Promise((r) => setTimeout(r, 50));
    stopped = await client.callTool({ name: 'wait', arguments: { ms: 10 } });
}
check('the cancelled call was stopped', stopped.content?.[0]?.text?.includes('(0 other waits running)'), stopped);

// The server asks the client's model while a call runs (sampling).
const asked = await client.callTool({ name: 'ask-model', arguments: { question: 'a name for the app?' } });
check('sampling: the tool got the client\'s answer', !asked.isError
  && asked.structuredContent?.answer === 'echo: a name for the app?' && asked.structuredContent?.model === 'interop-model', asked);
check('sampling: the client was asked once', equal(samples, ['a name for the app?']), samples);

// The server gives up on its own request (the tool's timeoutMs).
const gaveUp = await client.callTool({ name: 'ask-model', arguments: { question: SLOW_QUESTION, timeoutMs: 300 } });
check('ask timeout: the tool says it gave up', gaveUp.isError === true
  && gaveUp.content.some((c) => c.type === 'text' && c.text.includes('did not answer in time')), gaveUp);
// The notice precedes the tool's reply; a hang guard far below the
// model's time, not a measurement.
let guard;
await Promise.race([slowEnded, new Promise((resolve) => { guard = setTimeout(resolve, CANCEL_BOUND_MS); })]);
clearTimeout(guard);
console.log(`    slow model: ${slow.ended === undefined ? 'still running' : `${slow.outcome} after ${slow.ended - slow.started} ms, reason ${JSON.stringify(slow.reason)}`}`);
check('ask timeout: the handler\'s signal was aborted', slow.outcome === 'aborted', slow);
check('ask timeout: aborted well before the model would answer',
  slow.ended !== undefined && slow.ended - slow.started < CANCEL_BOUND_MS, slow);
check('ask timeout: the abort carries the server\'s reason', slow.reason === 'no response before the deadline', slow.reason);
// The aborted handler leaves the session usable.
const next = await client.callTool({ name: 'ask-model', arguments: { question: 'still there?', timeoutMs: 30000 } });
check('ask timeout: the next ask is answered', !next.isError && next.structuredContent?.answer === 'echo: still there?', next);

// An error thrown here would end the run before the failures are counted.
const pong = await client.ping().catch((error) => ({ error: String(error) }));
check('ping: answered with an empty result', equal(pong, {}), pong);

await client.close();
if (failures.length) {
  console.log(`typescript client (${transportName}): ${failures.length} checks failed: ${failures.join(', ')}`);
  process.exit(1);
}
console.log(`typescript client (${transportName}): all checks passed`);

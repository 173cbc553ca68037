// Drives examples/lsp_server over a child process's stdin/stdout with
// vscode-jsonrpc, the JSON-RPC library under VS Code's language clients
// (LSP's Content-Length framing, its `$/cancelRequest` cancellation, and
// requests from the server to the client on the same pipes, and the
// server's own `$/cancelRequest` for those it gives up on).
//
// usage: node check.mjs SERVER_BINARY
//
// Prints one line per check and "N passed, M failed"; exits non-zero on any
// failure or if the whole run takes longer than a minute (a hang).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import rpc from 'vscode-jsonrpc/node';

const { createMessageConnection, StreamMessageReader, StreamMessageWriter, CancellationTokenSource, ResponseError } = rpc;

const binary = process.argv[2];
if (!binary) {
  console.error('usage: node check.mjs SERVER_BINARY');
  process.exit(2);
}

let passed = 0;
let failed = 0;
const check = (name, ok, detail) => {
  if (ok) passed++; else failed++;
  console.log(`${ok ? 'ok   ' : 'FAIL '} ${name}${!ok && detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
};
const equal = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// Only to detect a hang: nothing here measures time.
const hang = setTimeout(() => {
  console.log('FAIL  the run did not finish within 60 s (a hang)');
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
}, 60_000);
hang.unref();

const version = JSON.parse(readFileSync(new URL('./node_modules/vscode-jsonrpc/package.json', import.meta.url))).version;
console.log(`vscode-jsonrpc ${version}, node ${process.version}, server ${binary}`);

const child = spawn(binary, [], { stdio: ['pipe', 'pipe', 'inherit'] });
const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));

// A copy of every byte the server writes, to check the framing afterwards.
const raw = [];
child.stdout.on('data', (chunk) => raw.push(chunk));

const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));

// window/logMessage notifications, and waiters for particular ones.
const logs = [];
const logWaiters = [];
connection.onNotification('window/logMessage', (params) => {
  logs.push(params);
  for (const w of [...logWaiters]) {
    if (w.match(params.message)) {
      logWaiters.splice(logWaiters.indexOf(w), 1);
      w.resolve(params);
    }
  }
});
// The first window/logMessage `match` accepts, or undefined when none
// comes within LOG_PATIENCE_MS (a hang guard: the checks then fail by name
// rather than the run's timeout killing the script).
const LOG_PATIENCE_MS = 10_000;
const logged = (match) => {
  const seen = logs.find((l) => match(l.message));
  if (seen) return Promise.resolve(seen);
  return new Promise((resolve) => {
    const waiter = { match, resolve };
    const guard = setTimeout(() => {
      logWaiters.splice(logWaiters.indexOf(waiter), 1);
      resolve(undefined);
    }, LOG_PATIENCE_MS);
    waiter.resolve = (params) => {
      clearTimeout(guard);
      resolve(params);
    };
    logWaiters.push(waiter);
  });
};

// The server's workspace/configuration requests, answered from `config`
// (or with an error when it is the string 'error'). When it is 'hold', the
// handler is a slow one: it answers only when its CancellationToken is
// cancelled (the server's $/cancelRequest for that request), or after
// HOLD_MS, far longer than the server waits; `held` says which came first.
const HOLD_MS = 20_000;
const configRequests = [];
const held = [];
const heldWaiters = [];
let config = { minWordLength: 1 };
connection.onRequest('workspace/configuration', (params, token) => {
  configRequests.push(params);
  if (config === 'error') {
    throw new ResponseError(-32001, 'no configuration today');
  }
  if (config === 'hold') {
    // Its place among the server's requests, to find its id in the frames.
    const entry = { index: configRequests.length - 1 };
    entry.ended = new Promise((resolve) => {
      const timer = setTimeout(() => resolve('its own timer'), HOLD_MS);
      token.onCancellationRequested(() => { clearTimeout(timer); resolve('cancelled'); });
    });
    held.push(entry);
    for (const w of heldWaiters.filter((w) => held.length >= w.n)) {
      heldWaiters.splice(heldWaiters.indexOf(w), 1);
      w.resolve();
    }
    // As LSP asks, a cancelled request is still answered: -32800, which
    // the server no longer waits for.
    return entry.ended.then((how) => {
      if (how === 'cancelled') throw new ResponseError(-32800, 'cancelled by the server');
      return params.items.map(() => null);
    });
  }
  return params.items.map((item) => (item.section === 'example' ? config : null));
});
// Resolves once `n` requests are held.
const heldCount = (n) => (held.length >= n ? Promise.resolve() : new Promise((resolve) => heldWaiters.push({ n, resolve })));

connection.listen();

async function expectError(promise) {
  try {
    return { result: await promise };
  } catch (e) {
    return { code: e instanceof ResponseError ? e.code : undefined, message: e.message, error: e };
  }
}

// The same count the server makes: runs of letters and digits.
const countWords = (text, min) => text.split(/[^\p{L}\p{N}]+/u).filter((w) => w.length > 0 && [...w].length >= min).length;

const uri = 'file:///tmp/rpcwire-lsp-interop/notes.txt';

// Before initialize: ServerNotInitialized.
const early = await expectError(connection.sendRequest('example/wordCount', { uri }));
check('a request before initialize gets -32002 (ServerNotInitialized)', early.code === -32002, early);

const init = await connection.sendRequest('initialize', {
  processId: process.pid,
  rootUri: null,
  capabilities: { workspace: { configuration: true } },
  clientInfo: { name: 'rpcwire-lsp-interop', version: '1.0.0' },
});
check('initialize answers capabilities (full text sync)', init?.capabilities?.textDocumentSync === 1, init);
check('initialize answers serverInfo', init?.serverInfo?.name === 'rpcwire-lsp-example', init);

await connection.sendNotification('initialized', {});
const initLog = await logged((m) => m === 'initialized');
check('initialized notification acknowledged by a window/logMessage', initLog?.type === 3, initLog);

const text = 'The quick brown fox jumps over a lazy dog; it was an old tale, 2 times told.';
await connection.sendNotification('textDocument/didOpen', {
  textDocument: { uri, languageId: 'plaintext', version: 1, text },
});
const openLog = await logged((m) => m.startsWith(`opened ${uri}`));
check('didOpen reached the server (it logs the document)', openLog?.message === `opened ${uri} (${Buffer.byteLength(text)} bytes)`, openLog);

// example/wordCount asks the client for its configuration first.
config = { minWordLength: 1 };
const all = await connection.sendRequest('example/wordCount', { uri });
check('workspace/configuration from the server reached the client handler', configRequests.length === 1, configRequests);
check('workspace/configuration params', equal(configRequests[0], { items: [{ section: 'example' }] }), configRequests[0]);
check('wordCount with minWordLength 1', all?.words === countWords(text, 1) && all?.minWordLength === 1, { all, expected: countWords(text, 1) });

config = { minWordLength: 4 };
const long = await connection.sendRequest('example/wordCount', { uri });
check('the client\'s configuration answer changes the result (minWordLength 4)',
  long?.words === countWords(text, 4) && long?.minWordLength === 4 && long.words < all.words,
  { long, expected: countWords(text, 4) });
check('a second workspace/configuration request reached the client', configRequests.length === 2, configRequests.length);
const countLog = await logged((m) => m === `${uri}: ${countWords(text, 4)} words of 4 or more characters`);
check('wordCount sends a window/logMessage with its count', countLog?.type === 3, countLog);

config = null;
const none = await connection.sendRequest('example/wordCount', { uri });
check('a null configuration section falls back to minWordLength 1', none?.minWordLength === 1 && none?.words === countWords(text, 1), none);

config = 'error';
const refused = await expectError(connection.sendRequest('example/wordCount', { uri }));
check('an error answer to workspace/configuration reaches the server (-32603 naming it)',
  refused.code === -32603 && /workspace\/configuration failed: no configuration today \(-32001\)/.test(refused.message), refused);
config = { minWordLength: 4 };

const changed = 'Completely different words here now';
await connection.sendNotification('textDocument/didChange', {
  textDocument: { uri, version: 2 },
  contentChanges: [{ text: changed }],
});
const afterChange = await connection.sendRequest('example/wordCount', { uri });
check('didChange (full text) replaces the document', afterChange?.words === countWords(changed, 4), { afterChange, expected: countWords(changed, 4) });

const unknownDoc = await expectError(connection.sendRequest('example/wordCount', { uri: 'file:///nope' }));
check('wordCount of an unknown document gets -32602', unknownDoc.code === -32602, unknownDoc);

const unknown = await expectError(connection.sendRequest('textDocument/hover', { textDocument: { uri }, position: { line: 0, character: 0 } }));
check('an unknown method gets -32601 (MethodNotFound)', unknown.code === -32601, unknown);

// Cancellation: a slow request, cancelled with $/cancelRequest while it runs.
const source = new CancellationTokenSource();
const slow = expectError(connection.sendRequest('example/slow', { ms: 60_000 }, source.token));
const slowLog = await logged((m) => m === 'example/slow: waiting 60000 ms');
check('the slow request started (the server logs its wait)', slowLog !== undefined);
// Other calls are answered while it runs (and asks the client meanwhile).
const meanwhile = await connection.sendRequest('example/wordCount', { uri });
check('a request is answered while the slow one runs', meanwhile?.words === countWords(changed, 4), meanwhile);
source.cancel();
const cancelled = await slow;
check('$/cancelRequest: the slow request is answered with -32800 (RequestCancelled)', cancelled.code === -32800, cancelled);
const cancelLog = await logged((m) => m === 'example/slow: cancelled');
check('the server saw the cancellation', cancelLog !== undefined);

// A request cancelled before it was even sent gets the same answer.
const early2 = new CancellationTokenSource();
early2.cancel();
const preCancelled = await expectError(connection.sendRequest('example/slow', { ms: 60_000 }, early2.token));
check('a request cancelled as it is sent gets -32800 too', preCancelled.code === -32800, preCancelled);

// The server gives up on a workspace/configuration the client is slow to
// answer (200 ms, the wordCount's configurationTimeoutMs): it counts with
// its defaults and says so, and tells the client with $/cancelRequest,
// which vscode-jsonrpc turns into the handler's cancelled token.
config = 'hold';
const fallbackAnswer = await expectError(connection.sendRequest('example/wordCount', { uri, configurationTimeoutMs: 200 }));
const fallback = fallbackAnswer.result;
check('a workspace/configuration not answered in time: the server answers with its defaults and says so',
  fallback?.minWordLength === 1 && fallback?.words === countWords(changed, 1)
    && fallback?.configurationFallback === 'the client did not answer workspace/configuration within 200 ms: default settings used',
  fallbackAnswer);
const timedOut = held.length === 1 ? await held[0].ended : `${held.length} held requests`;
check(`the server's $/cancelRequest cancelled the held request's token (not its own ${HOLD_MS} ms timer)`, timedOut === 'cancelled', timedOut);

// The client cancels its own wordCount while the server waits (up to
// 10 min) for the held workspace/configuration: -32800 for the client's
// request, and $/cancelRequest for the server's.
const abandon = new CancellationTokenSource();
const waiting = expectError(connection.sendRequest('example/wordCount', { uri, configurationTimeoutMs: 600_000 }, abandon.token));
await heldCount(2);
abandon.cancel();
const abandoned = await waiting;
check('the client cancels its wordCount while the server waits for workspace/configuration: -32800', abandoned.code === -32800, abandoned);
const followed = await held[1].ended;
check(`... and the server cancelled its workspace/configuration (the token, not its own ${HOLD_MS} ms timer)`, followed === 'cancelled', followed);

config = { minWordLength: 4 };
const again = (await expectError(connection.sendRequest('example/wordCount', { uri }))).result;
check('after the late -32800 answers, the configuration is asked and used again',
  again?.minWordLength === 4 && again?.words === countWords(changed, 4) && again?.configurationFallback === undefined, again);

const quick = await connection.sendRequest('example/slow', { ms: 5 });
check('a slow request that is not cancelled completes', equal(quick, { waited: 5 }), quick);

const down = await connection.sendRequest('shutdown');
check('shutdown answers null', down === null, down);
const late = await expectError(connection.sendRequest('example/wordCount', { uri }));
check('a request after shutdown gets -32600', late.code === -32600, late);

await connection.sendNotification('exit');
const status = await exited;
check('exit ends the server with status 0', status.code === 0 && status.signal === null, status);
connection.dispose();

// Every frame the server wrote: Content-Length framing, one JSON object
// each (LSP has no batches).
const bytes = Buffer.concat(raw);
const frames = [];
let at = 0;
let framingOk = true;
while (at < bytes.length) {
  const end = bytes.indexOf('\r\n\r\n', at);
  if (end < 0) { framingOk = false; break; }
  const header = bytes.subarray(at, end).toString('ascii');
  const m = /^Content-Length: (\d+)$/i.exec(header);
  if (!m) { framingOk = false; break; }
  const len = Number(m[1]);
  frames.push(bytes.subarray(end + 4, end + 4 + len).toString('utf8'));
  at = end + 4 + len;
}
check('every server frame is Content-Length framed, nothing left over', framingOk && at === bytes.length, { at, total: bytes.length });
const parsed = frames.map((f) => JSON.parse(f));
check('every server frame is one JSON-RPC object (no batch arrays)',
  parsed.length > 0 && parsed.every((p) => p !== null && typeof p === 'object' && !Array.isArray(p) && p.jsonrpc === '2.0'),
  parsed.filter((p) => Array.isArray(p)));
const serverRequests = parsed.filter((p) => p.method === 'workspace/configuration' && p.id !== undefined);
check('the server sent its workspace/configuration requests with ids of its own', serverRequests.length === configRequests.length && new Set(serverRequests.map((r) => r.id)).size === serverRequests.length, serverRequests.map((r) => r.id));
// The server's $/cancelRequest notifications: exactly {"id": <id>}, once
// for each of the two held requests and for nothing else.
const heldIds = held.map((h) => serverRequests[h.index]?.id);
const serverCancels = parsed.filter((p) => p.method === '$/cancelRequest');
check('the server sent $/cancelRequest exactly {"id": <its request\'s id>}, once for each held request, for nothing else',
  serverCancels.length === 2 && serverCancels.every((p) => p.id === undefined)
    && equal(serverCancels.map((p) => p.params), heldIds.map((id) => ({ id }))),
  { serverCancels, heldIds });
console.log(`frames from the server: ${frames.length} (${parsed.filter((p) => p.method === 'window/logMessage').length} window/logMessage, ${serverRequests.length} workspace/configuration, ${serverCancels.length} $/cancelRequest)`);

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

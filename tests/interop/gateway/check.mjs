// viem and ethers v6 (the JavaScript clients) through the gateway, compared
// with the node.
//
// usage: node check.mjs proxy GATEWAY_URL ANVIL_URL [GATEWAY_IPC_PATH]
//        node check.mjs builtin GATEWAY_URL [GATEWAY_IPC_PATH]
//
// proxy: each answer through the gateway must equal the same call's answer
// straight from anvil: viem's reads, a value transfer signed locally and
// its receipt, a deployment and a call that emits an event and its logs, a
// JSON-RPC batch (`http(url, { batch: true })`), and newHeads over a
// WebSocket on the gateway's port (`watchBlocks`, `watchBlockNumber`,
// unwatched with eth_unsubscribe); ethers' JsonRpcProvider (which batches
// concurrent calls), a Wallet's transfer and `wait()`, and a
// WebSocketProvider's "block" events.
// builtin: the same clients against the built-in chain, for what it
// supports (transfers, blocks, receipts, newHeads; no EVM).
// With GATEWAY_IPC_PATH (the gateway's --ipc socket), over it: viem's
// `ipc` transport (getChainId, getBlockNumber, watchBlockNumber on
// newHeads, unwatched with eth_unsubscribe) and ethers'
// IpcSocketProvider (getBlockNumber, getBalance, "block" events);
// compared with anvil in proxy mode, with the gateway's HTTP answers on
// the built-in chain.
//
// Prints one line per check and a closing "js: N passed, M failed"; exits
// 1 on any failure. Every step has a timeout, and the whole run one more,
// so nothing hangs.

import { inspect, isDeepStrictEqual } from "node:util";

import { IpcSocketProvider, JsonRpcProvider, WebSocketProvider, Wallet, parseEther as ethersParseEther } from "ethers";
import { createPublicClient, createWalletClient, http, parseEther, webSocket } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { foundry } from "viem/chains";
import { ipc } from "viem/node";

// run.sh's KEY0: anvil's first dev account (funded on the built-in chain too).
const KEY0 = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const ACCOUNT0 = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const ACCOUNT1 = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
// A contract whose every call emits LOG1(topic 1, data 42).
const EMITTER = "0x600d600c600039600d6000f3602a600052600160206000a100";
const STEP_MS = 20_000;

let passed = 0;
let failed = 0;

function check(name, ok, detail = "") {
    if (ok) {
        passed += 1;
        console.log(`ok    ${name}`);
    } else {
        failed += 1;
        console.log(`FAIL  ${name} ${typeof detail === "string" ? detail : show(detail)}`);
    }
}

function show(v) {
    return inspect(v, { depth: 6, breakLength: 120 }).slice(0, 2000);
}

function same(name, got, want) {
    check(name, isDeepStrictEqual(got, want), `\n  gateway: ${show(got)}\n  node:    ${show(want)}`);
}

// Runs one step; an exception or the timeout is that step's failure, and
// the run goes on.
async function step(name, fn, ms = STEP_MS) {
    let timer;
    const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    });
    try {
        return await Promise.race([fn(), timeout]);
    } catch (e) {
        check(name, false, `threw: ${(e && (e.shortMessage || e.message)) || e}`);
        return undefined;
    } finally {
        clearTimeout(timer);
    }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Waits until `ready()` holds, for at most `ms`; whether it does.
async function until(ready, ms = 10_000) {
    const end = Date.now() + ms;
    while (!ready()) {
        if (Date.now() > end) return false;
        await sleep(20);
    }
    return true;
}

// A plain JSON-RPC call (evm_mine on anvil).
async function rpc(url, method, params = []) {
    const r = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
        signal: AbortSignal.timeout(10_000),
    });
    return (await r.json()).result;
}

const wsUrl = (url) => url.replace(/^http:/, "ws:");

// A viem public client: no caching of eth_blockNumber (each call asks),
// fast polling (anvil and the built-in chain mine at once).
function client(transport) {
    return createPublicClient({ chain: foundry, transport, cacheTime: 0, pollingInterval: 100 });
}

function wallet(url) {
    return createWalletClient({
        account: privateKeyToAccount(KEY0),
        chain: foundry,
        transport: http(url, { timeout: 10_000 }),
    });
}

// viem: a value transfer signed locally, and its receipt.
async function transfer(url, value, extra = {}) {
    const hash = await wallet(url).sendTransaction({ to: ACCOUNT1, value, ...extra });
    return client(http(url)).waitForTransactionReceipt({ hash, timeout: 15_000 });
}

// The calls viem's batch check makes at once.
function batchCalls(c, block) {
    return Promise.all([
        c.getBlockNumber(),
        c.getBalance({ address: ACCOUNT1 }),
        c.getTransactionCount({ address: ACCOUNT0 }),
        c.getBlock({ blockNumber: block }),
        c.getChainId(),
        c.getGasPrice(),
        c.getCode({ address: ACCOUNT1 }),
    ]);
}

// A viem client with batching whose request bodies are kept.
function batchingClient(url) {
    const bodies = [];
    const c = client(
        http(url, {
            batch: true,
            timeout: 10_000,
            onFetchRequest: (_request, init) => {
                bodies.push(String(init.body));
            },
        }),
    );
    return { c, bodies };
}

// Whether one of `bodies` is a JSON-RPC batch of `n` calls.
const sentBatch = (bodies, n) =>
    bodies.some((b) => {
        const v = JSON.parse(b);
        return Array.isArray(v) && v.length === n;
    });

async function viemProxy(gw, node) {
    const g = client(http(gw, { timeout: 10_000 }));
    const n = client(http(node, { timeout: 10_000 }));
    await step("viem/getChainId", async () => same("viem/getChainId", await g.getChainId(), await n.getChainId()));
    await step("viem/getBlockNumber", async () =>
        same("viem/getBlockNumber", await g.getBlockNumber(), await n.getBlockNumber()),
    );
    await step("viem/getBalance", async () =>
        same("viem/getBalance", await g.getBalance({ address: ACCOUNT0 }), await n.getBalance({ address: ACCOUNT0 })),
    );
    await step("viem/getTransactionCount", async () =>
        same(
            "viem/getTransactionCount",
            await g.getTransactionCount({ address: ACCOUNT0 }),
            await n.getTransactionCount({ address: ACCOUNT0 }),
        ),
    );

    const receipt = await step("viem/sendTransaction", async () => {
        const r = await transfer(gw, parseEther("0.25"));
        check("viem/sendTransaction + waitForTransactionReceipt", r.status === "success", r);
        return r;
    });
    if (receipt) {
        const hash = receipt.transactionHash;
        await step("viem/receipt", async () =>
            same("viem/receipt", receipt, await n.getTransactionReceipt({ hash })),
        );
        await step("viem/getTransaction", async () =>
            same("viem/getTransaction", await g.getTransaction({ hash }), await n.getTransaction({ hash })),
        );
        await step("viem/getBlock by number", async () => {
            const args = { blockNumber: receipt.blockNumber, includeTransactions: true };
            same("viem/getBlock by number", await g.getBlock(args), await n.getBlock(args));
        });
        await step("viem/getBlock by hash", async () => {
            const args = { blockHash: receipt.blockHash };
            same("viem/getBlock by hash", await g.getBlock(args), await n.getBlock(args));
        });
    }
    await step("viem/legacy transfer", async () => {
        const r = await transfer(gw, 1n, { type: "legacy" });
        check("viem/legacy transfer", r.status === "success" && r.type === "legacy", r);
    });
    await step("viem/estimateGas", async () => {
        const args = { account: ACCOUNT0, to: ACCOUNT1, value: 1n };
        same("viem/estimateGas", await g.estimateGas(args), await n.estimateGas(args));
    });

    // Deploy the emitter, call it once, read its log back.
    await step("viem/getLogs", async () => {
        const w = wallet(gw);
        const deployed = await g.waitForTransactionReceipt({
            hash: await w.sendTransaction({ data: EMITTER }),
            timeout: 15_000,
        });
        const address = deployed.contractAddress;
        check("viem/deploy", deployed.status === "success" && address, deployed);
        const called = await g.waitForTransactionReceipt({
            hash: await w.sendTransaction({ to: address }),
            timeout: 15_000,
        });
        check("viem/event emitted", called.logs.length === 1, called);
        const filter = { address, fromBlock: 0n, toBlock: "latest" };
        const logs = await g.getLogs(filter);
        check("viem/getLogs: one log", logs.length === 1 && logs[0].transactionHash === called.transactionHash, logs);
        same("viem/getLogs", logs, await n.getLogs(filter));
        same("viem/getLogs from 0", await g.getLogs({ fromBlock: 0n }), await n.getLogs({ fromBlock: 0n }));
    });

    await step("viem/batch", async () => {
        const gb = batchingClient(gw);
        const nb = batchingClient(node);
        const got = await batchCalls(gb.c, 1n);
        const want = await batchCalls(nb.c, 1n);
        check("viem/batch sent as one JSON-RPC batch", sentBatch(gb.bodies, 7), gb.bodies);
        same("viem/batch", got, want);
    });

    await viemSubscriptions(gw, node);
}

// viem's watchBlocks and watchBlockNumber over WebSocket (eth_subscribe
// newHeads), on the gateway and on anvil at once: the heads must be the
// same. Blocks are mined on anvil with evm_mine.
async function viemSubscriptions(gw, node) {
    // keepAlive: viem pings with `{"id":null,"method":"net_version"}`;
    // often, so that the run sees some.
    const opts = { keepAlive: { interval: 300 }, reconnect: false, timeout: 10_000 };
    const g = client(webSocket(wsUrl(gw), opts));
    const n = client(webSocket(wsUrl(node), opts));
    await step("viem/ws getBlockNumber", async () =>
        same("viem/ws getBlockNumber", await g.getBlockNumber(), await n.getBlockNumber()),
    );
    const seen = { g: { blocks: [], numbers: [], errors: [] }, n: { blocks: [], numbers: [], errors: [] } };
    const unwatch = [];
    await step("viem/watchBlocks over ws", async () => {
        for (const [c, s] of [
            [g, seen.g],
            [n, seen.n],
        ]) {
            const onError = (e) => s.errors.push(e.shortMessage || e.message);
            unwatch.push(c.watchBlocks({ onBlock: (b) => s.blocks.push(b), onError }));
            unwatch.push(c.watchBlockNumber({ onBlockNumber: (b) => s.numbers.push(b), onError }));
        }
        // Both subscriptions are in place on both sockets before a block
        // is mined.
        const gc = await g.transport.getRpcClient();
        const nc = await n.transport.getRpcClient();
        const subscribed = await until(() => gc.subscriptions.size === 2 && nc.subscriptions.size === 2);
        check("viem/ws eth_subscribe newHeads (2 subscriptions)", subscribed, seen.g.errors);
        await rpc(node, "evm_mine");
        await rpc(node, "evm_mine");
        const arrived = await until(
            () => seen.g.blocks.length >= 2 && seen.n.blocks.length >= 2 && seen.g.numbers.length >= 2,
        );
        check("viem/watchBlocks: heads arrive", arrived, seen);
        // viem fetches each head's block (eth_getBlockByNumber) before
        // onBlock, so two heads in quick succession may come out of order,
        // straight from anvil too: compared by number.
        const byNumber = (blocks) => blocks.slice(0, 2).sort((x, y) => (x.number < y.number ? -1 : 1));
        same("viem/watchBlocks: the same heads as anvil's", byNumber(seen.g.blocks), byNumber(seen.n.blocks));
        same("viem/watchBlockNumber", seen.g.numbers.slice(0, 2), seen.n.numbers.slice(0, 2));
        const head = await client(http(node)).getBlock();
        check(
            "viem/watchBlocks: the head is the block",
            seen.g.blocks.some((b) => b.hash === head.hash),
            [seen.g.blocks.map((b) => b.hash), head.hash],
        );
        check("viem/watch: no errors", seen.g.errors.length === 0, seen.g.errors);

        // Unwatching unsubscribes (eth_unsubscribe); no head arrives after.
        for (const u of unwatch) u();
        const gone = await until(() => gc.subscriptions.size === 0, 5_000);
        check("viem/unwatch: eth_unsubscribe", gone, gc.subscriptions.size);
        await sleep(200);
        const before = seen.g.blocks.length + seen.g.numbers.length;
        await rpc(node, "evm_mine");
        await sleep(500);
        check("viem/unwatch: no more heads", seen.g.blocks.length + seen.g.numbers.length === before, seen.g);

        // The transport's own subscribe: eth_unsubscribe answers true.
        const sub = await g.transport.subscribe({ params: ["newHeads"], onData: () => {}, onError: () => {} });
        const answer = await sub.unsubscribe();
        check("viem/eth_unsubscribe answers true", answer.result === true, answer);
        // The keep-alive pings (id null) left the socket usable.
        same("viem/ws after keep-alive pings", await g.getBlockNumber(), await n.getBlockNumber());
    });
    for (const c of [g, n]) {
        try {
            (await c.transport.getRpcClient()).close();
        } catch {
            // Already closed.
        }
    }
}

// ethers: a JsonRpcProvider whose JSON-RPC payloads are kept (it batches
// calls made in the same few milliseconds). Without its 250 ms cache of
// identical calls (cacheTimeout -1, also on the WebSocketProviders): a
// balance or a nonce read again right after a transfer is fresh.
function provider(url) {
    const p = new JsonRpcProvider(url, undefined, { pollingInterval: 100, cacheTimeout: -1 });
    const payloads = [];
    p.on("debug", (e) => {
        if (e.action === "sendRpcPayload") payloads.push(e.payload);
    });
    return { p, payloads };
}

// How many of ethers' eth_subscribe (or filter-making) calls on `p` were
// answered with an id (its `on` resolves before that), and how many of its
// eth_unsubscribe (eth_uninstallFilter) calls were answered `true` (its
// `off` sends one without waiting for it, and
// `destroy` cancels it if unanswered, a rejection ethers leaves
// unhandled): functions to poll.
function subscribed(p) {
    const subscribes = new Set();
    const unsubscribes = new Set();
    const count = { answered: 0, unsubscribed: 0 };
    p.on("debug", (e) => {
        if (e.action === "sendRpcPayload") {
            for (const x of [e.payload].flat()) {
                // Filters (polling over HTTP) count as subscriptions.
                if (["eth_subscribe", "eth_newPendingTransactionFilter", "eth_newFilter"].includes(x.method)) {
                    subscribes.add(x.id);
                }
                if (["eth_unsubscribe", "eth_uninstallFilter"].includes(x.method)) unsubscribes.add(x.id);
            }
        } else if (e.action === "receiveRpcResult") {
            for (const x of [e.result].flat()) {
                if (subscribes.has(x.id) && typeof x.result === "string") count.answered += 1;
                if (unsubscribes.has(x.id) && x.result === true) count.unsubscribed += 1;
            }
        }
    });
    const answered = () => count.answered;
    answered.unsubscribed = () => count.unsubscribed;
    return answered;
}

// ethers' JSON, comparable.
const plain = (v) => JSON.parse(JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x)));

async function ethersProxy(gw, node) {
    const { p: g, payloads } = provider(gw);
    const { p: n } = provider(node);
    await step("ethers/getNetwork", async () => {
        const [a, b] = [await g.getNetwork(), await n.getNetwork()];
        same("ethers/getNetwork", a.chainId, b.chainId);
    });
    await step("ethers/batched reads", async () => {
        const reads = (p) =>
            Promise.all([
                p.getBlockNumber(),
                p.getBalance(ACCOUNT0),
                p.getTransactionCount(ACCOUNT0),
                p.getBlock(1),
                p.getFeeData(),
            ]).then(plain);
        const got = await reads(g);
        same("ethers/batched reads", got, await reads(n));
        check(
            "ethers/reads sent as a JSON-RPC batch",
            payloads.some((x) => Array.isArray(x) && x.length >= 3),
            payloads,
        );
    });
    await step("ethers/getBlockNumber", async () =>
        same("ethers/getBlockNumber", await g.getBlockNumber(), await n.getBlockNumber()),
    );
    await step("ethers/getBalance", async () =>
        same("ethers/getBalance", await g.getBalance(ACCOUNT1), await n.getBalance(ACCOUNT1)),
    );
    await step("ethers/Wallet.sendTransaction", async () => {
        const w = new Wallet(KEY0, g);
        const tx = await w.sendTransaction({ to: ACCOUNT1, value: ethersParseEther("0.125") });
        const r = await tx.wait(1, 15_000);
        check("ethers/Wallet.sendTransaction + wait()", r?.status === 1, r);
        same("ethers/receipt", plain(r), plain(await n.getTransactionReceipt(tx.hash)));
        same("ethers/getTransaction", plain(await g.getTransaction(tx.hash)), plain(await n.getTransaction(tx.hash)));
    });
    g.destroy();
    n.destroy();

    await step("ethers/WebSocketProvider", async () => {
        const ws = new WebSocketProvider(wsUrl(gw), undefined, { cacheTimeout: -1 });
        const answered = subscribed(ws);
        try {
            same("ethers/ws getBlockNumber", await ws.getBlockNumber(), await rpcNumber(node));
            const got = [];
            await ws.on("block", (b) => got.push(b));
            check("ethers/ws eth_subscribe newHeads", await until(() => answered() === 1));
            await rpc(node, "evm_mine");
            await rpc(node, "evm_mine");
            const arrived = await until(() => got.length >= 2);
            const head = await rpcNumber(node);
            check('ethers/on("block")', arrived && got.at(-1) === head, { got, head });
            await ws.off("block");
            check("ethers/ws off: eth_unsubscribe", await until(() => answered.unsubscribed() === 1));
            same("ethers/ws after off", await ws.getBlockNumber(), head);
        } finally {
            await ws.destroy();
        }
    });
}

async function rpcNumber(url) {
    return Number(await rpc(url, "eth_blockNumber"));
}

async function viemBuiltin(gw) {
    const g = client(http(gw, { timeout: 10_000 }));
    await step("viem/getChainId", async () => check("viem/getChainId", (await g.getChainId()) === 31337));
    const start = await step("viem/getBlockNumber", async () => {
        const b = await g.getBlockNumber();
        check(`viem/getBlockNumber (${b})`, typeof b === "bigint");
        return b;
    });
    const before = await step("viem/getBalance", async () => {
        const b = await g.getBalance({ address: ACCOUNT1 });
        check("viem/getBalance", (await g.getBalance({ address: ACCOUNT0 })) > 0n && b > 0n, b);
        return b;
    });
    const nonce = await step("viem/getTransactionCount", async () => {
        const x = await g.getTransactionCount({ address: ACCOUNT0 });
        check("viem/getTransactionCount", typeof x === "number", x);
        return x;
    });
    await step("viem/estimateGas", async () =>
        same("viem/estimateGas", await g.estimateGas({ account: ACCOUNT0, to: ACCOUNT1, value: 1n }), 21000n),
    );
    await step("viem/estimateFeesPerGas", async () => {
        const f = await g.estimateFeesPerGas();
        check("viem/estimateFeesPerGas", f.maxFeePerGas >= f.maxPriorityFeePerGas && f.maxPriorityFeePerGas > 0n, f);
    });
    await step("viem/getBlock pending", async () => {
        const b = await g.getBlock({ blockTag: "pending" });
        check("viem/getBlock pending", b && typeof b.number === "bigint", b);
    });
    const receipt = await step("viem/sendTransaction", async () => {
        const r = await transfer(gw, parseEther("0.25"));
        check("viem/sendTransaction + waitForTransactionReceipt", r.status === "success" && r.gasUsed === 21000n, r);
        return r;
    });
    if (receipt) {
        const hash = receipt.transactionHash;
        await step("viem/after the transfer", async () => {
            check("viem/a block per transaction", receipt.blockNumber === start + 1n, [receipt.blockNumber, start]);
            same("viem/balance after", await g.getBalance({ address: ACCOUNT1 }), before + parseEther("0.25"));
            same("viem/nonce after", await g.getTransactionCount({ address: ACCOUNT0 }), nonce + 1);
            const tx = await g.getTransaction({ hash });
            check(
                "viem/getTransaction",
                tx.from.toLowerCase() === ACCOUNT0.toLowerCase() && tx.value === parseEther("0.25") && tx.type === "eip1559",
                tx,
            );
            const byNumber = await g.getBlock({ blockNumber: receipt.blockNumber, includeTransactions: true });
            check("viem/getBlock by number", byNumber.transactions[0]?.hash === hash, byNumber);
            const byHash = await g.getBlock({ blockHash: receipt.blockHash, includeTransactions: true });
            same("viem/getBlock by hash", byHash, byNumber);
            same("viem/getLogs (transfers emit none)", await g.getLogs({ fromBlock: 0n }), []);
        });
    }
    await step("viem/legacy transfer", async () => {
        const r = await transfer(gw, 1n, { type: "legacy" });
        check("viem/legacy transfer", r.status === "success" && r.type === "legacy", r);
    });
    await step("viem/batch", async () => {
        const { c, bodies } = batchingClient(gw);
        const got = await batchCalls(c, 1n);
        check("viem/batch sent as one JSON-RPC batch", sentBatch(bodies, 7), bodies);
        const [head, balance, count, block, id, price, code] = got;
        check(
            "viem/batch",
            head === (await g.getBlockNumber()) &&
                balance === (await g.getBalance({ address: ACCOUNT1 })) &&
                count === (await g.getTransactionCount({ address: ACCOUNT0 })) &&
                block.number === 1n &&
                id === 31337 &&
                price > 0n &&
                code === undefined,
            got,
        );
    });
    // Polling (HTTP): watchBlockNumber sees the block a transfer makes.
    await step("viem/watchBlockNumber (polling)", async () => {
        const numbers = [];
        const unwatch = g.watchBlockNumber({ onBlockNumber: (b) => numbers.push(b), poll: true, pollingInterval: 100 });
        await until(() => numbers.length > 0, 5_000);
        const r = await transfer(gw, 1n);
        const seen = await until(() => numbers.includes(r.blockNumber), 5_000);
        unwatch();
        check("viem/watchBlockNumber (polling)", seen, numbers);
    });
    // geth's filters, polled by hand: a block filter and a pending
    // transaction filter see the transfer; uninstalled once.
    await step("viem/filters", async () => {
        const blocks = await g.createBlockFilter();
        const pending = await g.createPendingTransactionFilter();
        const r = await transfer(gw, 1n);
        same("viem/getFilterChanges (block filter)", await g.getFilterChanges({ filter: blocks }), [r.blockHash]);
        same("viem/getFilterChanges (pending filter)", await g.getFilterChanges({ filter: pending }), [r.transactionHash]);
        same("viem/getFilterChanges again: nothing new", await g.getFilterChanges({ filter: blocks }), []);
        const events = await g.createEventFilter({ address: ACCOUNT1, fromBlock: 0n });
        same("viem/getFilterLogs (transfers emit none)", await g.getFilterLogs({ filter: events }), []);
        same("viem/uninstallFilter", await g.uninstallFilter({ filter: blocks }), true);
        same("viem/uninstallFilter again", await g.uninstallFilter({ filter: blocks }), false);
        await g.uninstallFilter({ filter: pending });
        await g.uninstallFilter({ filter: events });
    });
    // WebSocket: newHeads; a transfer makes the head.
    await step("viem/ws watchBlocks", async () => {
        const w = client(webSocket(wsUrl(gw), { reconnect: false, timeout: 10_000 }));
        const rpcClient = await w.transport.getRpcClient();
        try {
            same("viem/ws getBlockNumber", await w.getBlockNumber(), await g.getBlockNumber());
            const blocks = [];
            const numbers = [];
            const errors = [];
            const onError = (e) => errors.push(e.shortMessage || e.message);
            const unwatch = [
                w.watchBlocks({ onBlock: (b) => blocks.push(b), onError }),
                w.watchBlockNumber({ onBlockNumber: (b) => numbers.push(b), onError }),
            ];
            const subscribed = await until(() => rpcClient.subscriptions.size === 2 || errors.length > 0);
            check("viem/ws eth_subscribe newHeads", subscribed && errors.length === 0, errors);
            const r = await transfer(gw, 1n);
            const arrived = await until(() => blocks.length > 0 && numbers.length > 0);
            check(
                "viem/ws watchBlocks: the transfer's block",
                arrived && blocks[0].hash === r.blockHash && numbers[0] === r.blockNumber,
                { blocks, numbers, receipt: r },
            );
            for (const u of unwatch) u();
            const gone = await until(() => rpcClient.subscriptions.size === 0, 5_000);
            check("viem/ws unwatch: eth_unsubscribe", gone, rpcClient.subscriptions.size);
        } finally {
            rpcClient.close();
        }
    });
}

// ethers' on("pending") on provider `p`: once its subscription (or filter)
// is answered, a transfer; whether its hash came, and `off` answered
// (`ends` is the method that ends it: eth_unsubscribe or
// eth_uninstallFilter).
async function pendingSeen(p, ends) {
    const answered = subscribed(p);
    const got = [];
    await p.on("pending", (h) => got.push(h));
    check(`ethers/on("pending") answered`, await until(() => answered() === 1));
    const tx = await new Wallet(KEY0, p).sendTransaction({ to: ACCOUNT1, value: 1n });
    await tx.wait(1, 15_000);
    const seen = await until(() => got.includes(tx.hash), 5_000);
    await p.off("pending");
    check(`ethers/off("pending"): ${ends}`, await until(() => answered.unsubscribed() === 1));
    return { seen, got, sent: tx.hash };
}

async function ethersBuiltin(gw) {
    const { p: g, payloads } = provider(gw);
    await step("ethers/getNetwork", async () => same("ethers/getNetwork", (await g.getNetwork()).chainId, 31337n));
    await step("ethers/batched reads", async () => {
        const [head, balance, count, fees] = await Promise.all([
            g.getBlockNumber(),
            g.getBalance(ACCOUNT0),
            g.getTransactionCount(ACCOUNT0),
            g.getFeeData(),
        ]);
        check(
            "ethers/batched reads",
            head > 0 && balance > 0n && count >= 0 && fees.maxFeePerGas > fees.maxPriorityFeePerGas,
            [head, balance, count, fees],
        );
        check(
            "ethers/reads sent as a JSON-RPC batch",
            payloads.some((x) => Array.isArray(x) && x.length >= 3),
            payloads,
        );
    });
    await step("ethers/Wallet.sendTransaction", async () => {
        const w = new Wallet(KEY0, g);
        const before = await g.getBalance(ACCOUNT1);
        const head = await g.getBlockNumber();
        const tx = await w.sendTransaction({ to: ACCOUNT1, value: ethersParseEther("0.125") });
        const r = await tx.wait(1, 15_000);
        check("ethers/Wallet.sendTransaction + wait()", r?.status === 1 && r.blockNumber === head + 1, r);
        same("ethers/balance after", await g.getBalance(ACCOUNT1), before + ethersParseEther("0.125"));
        const t = await g.getTransaction(tx.hash);
        check("ethers/getTransaction", t?.from === ACCOUNT0 && t.blockHash === r.blockHash, t);
    });
    // The node's accounts: a JsonRpcSigner sends eth_sendTransaction,
    // which the node signs for its dev accounts (as anvil does).
    await step("ethers/getSigner().sendTransaction", async () => {
        const signer = await g.getSigner(0);
        check("ethers/getSigner(0)", signer.address === ACCOUNT0, signer.address);
        const before = await g.getBalance(ACCOUNT1);
        const tx = await signer.sendTransaction({ to: ACCOUNT1, value: 3n });
        const r = await tx.wait(1, 15_000);
        check("ethers/getSigner().sendTransaction + wait()", r?.status === 1, r);
        same("ethers/balance after the signer's", await g.getBalance(ACCOUNT1), before + 3n);
    });
    // Polling (HTTP): "block" events as transfers make blocks.
    await step('ethers/on("block") (polling)', async () => {
        const got = [];
        const mark = payloads.length;
        await g.on("block", (b) => got.push(b));
        // Its first poll only learns the head (a block mined before that
        // answer is never emitted); the second is sent once it did.
        const polls = () =>
            payloads.slice(mark).flat().filter((m) => m.method === "eth_blockNumber").length;
        check('ethers/on("block") polls', await until(() => polls() >= 2), payloads.slice(mark));
        const w = new Wallet(KEY0, g);
        const r = await (await w.sendTransaction({ to: ACCOUNT1, value: 1n })).wait(1, 15_000);
        const seen = await until(() => got.includes(r.blockNumber), 5_000);
        await g.off("block");
        check('ethers/on("block") (polling)', seen, { got, block: r.blockNumber });
    });
    // Polling (HTTP): ethers watches the pool through
    // eth_newPendingTransactionFilter and eth_getFilterChanges.
    await step('ethers/on("pending") (polling filter)', async () => {
        const seen = await pendingSeen(g, "eth_uninstallFilter");
        check('ethers/on("pending") (polling filter)', seen.seen, seen);
        check(
            'ethers/on("pending") used a filter',
            payloads.some((x) => [x].flat().some((m) => m.method === "eth_newPendingTransactionFilter")),
            payloads.map((x) => [x].flat().map((m) => m.method)),
        );
    });
    g.destroy();
    await step('ethers/ws on("pending")', async () => {
        const ws = new WebSocketProvider(wsUrl(gw), undefined, { cacheTimeout: -1 });
        try {
            const seen = await pendingSeen(ws, "eth_unsubscribe");
            check('ethers/ws on("pending"): eth_subscribe newPendingTransactions', seen.seen, seen);
        } finally {
            await ws.destroy();
        }
    });
    await step("ethers/WebSocketProvider", async () => {
        const ws = new WebSocketProvider(wsUrl(gw), undefined, { cacheTimeout: -1 });
        const answered = subscribed(ws);
        try {
            same("ethers/ws getBlockNumber", await ws.getBlockNumber(), await rpcNumber(gw));
            const got = [];
            await ws.on("block", (b) => got.push(b));
            check("ethers/ws eth_subscribe newHeads", await until(() => answered() === 1));
            const w = new Wallet(KEY0, ws);
            const r = await (await w.sendTransaction({ to: ACCOUNT1, value: 1n })).wait(1, 15_000);
            const seen = await until(() => got.includes(r.blockNumber));
            check('ethers/ws on("block")', seen, { got, block: r.blockNumber });
            await ws.off("block");
            check("ethers/ws off: eth_unsubscribe", await until(() => answered.unsubscribed() === 1));
        } finally {
            await ws.destroy();
        }
    });
}

// Over the gateway's --ipc socket at `path`. `reference` answers the same
// reads (anvil, or the gateway's HTTP on the built-in chain); `mine()`
// makes a block (evm_mine on anvil, a transfer on the built-in chain).
async function ipcChecks(path, reference, mine) {
    const r = client(http(reference, { timeout: 10_000 }));
    const v = client(ipc(path, { reconnect: false, timeout: 10_000 }));
    await step("viem/ipc getChainId", async () =>
        same("viem/ipc getChainId", await v.getChainId(), await r.getChainId()),
    );
    await step("viem/ipc getBlockNumber", async () =>
        same("viem/ipc getBlockNumber", await v.getBlockNumber(), await r.getBlockNumber()),
    );
    await step("viem/ipc getBalance", async () =>
        same(
            "viem/ipc getBalance",
            await v.getBalance({ address: ACCOUNT0 }),
            await r.getBalance({ address: ACCOUNT0 }),
        ),
    );
    await step("viem/ipc watchBlockNumber", async () => {
        const rpcClient = await v.transport.getRpcClient();
        try {
            const numbers = [];
            const errors = [];
            const unwatch = v.watchBlockNumber({
                onBlockNumber: (b) => numbers.push(b),
                onError: (e) => errors.push(e.shortMessage || e.message),
            });
            const subscribed = await until(() => rpcClient.subscriptions.size === 1 || errors.length > 0);
            check("viem/ipc eth_subscribe newHeads", subscribed && errors.length === 0, errors);
            await mine();
            const head = await r.getBlockNumber();
            const arrived = await until(() => numbers.includes(head));
            check("viem/ipc watchBlockNumber: the new head", arrived, { numbers, head });
            unwatch();
            const gone = await until(() => rpcClient.subscriptions.size === 0, 5_000);
            check("viem/ipc unwatch: eth_unsubscribe", gone, rpcClient.subscriptions.size);
            same("viem/ipc after unwatch", await v.getBlockNumber(), head);
        } finally {
            rpcClient.close();
        }
    });

    await step("ethers/IpcSocketProvider", async () => {
        const p = new IpcSocketProvider(path, undefined, { cacheTimeout: -1 });
        const answered = subscribed(p);
        try {
            same("ethers/ipc getBlockNumber", await p.getBlockNumber(), Number(await r.getBlockNumber()));
            same("ethers/ipc getBalance", await p.getBalance(ACCOUNT0), await r.getBalance({ address: ACCOUNT0 }));
            const got = [];
            await p.on("block", (b) => got.push(b));
            check("ethers/ipc eth_subscribe newHeads", await until(() => answered() === 1));
            await mine();
            const head = Number(await r.getBlockNumber());
            const arrived = await until(() => got.includes(head));
            check('ethers/ipc on("block")', arrived, { got, head });
            await p.off("block");
            check("ethers/ipc off: eth_unsubscribe", await until(() => answered.unsubscribed() === 1));
            same("ethers/ipc after off", await p.getBlockNumber(), head);
        } finally {
            p.destroy();
        }
    });
}

async function main() {
    const [mode, gw, ...rest] = process.argv.slice(2);
    const node = mode === "proxy" ? rest[0] : undefined;
    const ipcPath = mode === "proxy" ? rest[1] : rest[0];
    // A client's failure outside any await (ethers rejects a refused
    // subscription this way) is a failure, not a crash without a count.
    process.on("unhandledRejection", (e) =>
        check("js: no unhandled rejection", false, (e && (e.shortMessage || e.message)) || String(e)),
    );
    // The whole run's bound, past every step's own.
    setTimeout(() => {
        check("js: the run finished in time", false, "(110 s)");
        console.log(`js: ${passed} passed, ${failed} failed`);
        process.exit(1);
    }, 110_000).unref();
    try {
        if (mode === "proxy") {
            await viemProxy(gw, node);
            await ethersProxy(gw, node);
            if (ipcPath) await ipcChecks(ipcPath, node, () => rpc(node, "evm_mine"));
        } else {
            await viemBuiltin(gw);
            await ethersBuiltin(gw);
            if (ipcPath) await ipcChecks(ipcPath, gw, () => transfer(gw, 1n));
        }
    } catch (e) {
        // A client error outside a step is a failure, not a crash.
        check("js: no exception", false, e?.stack || String(e));
    }
    console.log(`js: ${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
}

await main();

"""web3.py (and raw JSON-RPC) through the gateway, compared with the node.

usage: check.py proxy GATEWAY_URL ANVIL_URL [GATEWAY_IPC_PATH]
       check.py builtin GATEWAY_URL [GATEWAY_IPC_PATH]

proxy: every answer through the gateway must equal anvil's own (the JSON,
modulo ids): reads, a value transfer, a contract deployment, a call that
emits an event and its logs, a batch, errors passed through, and a newHeads
subscription over WebSocket on the gateway's port.
builtin: the same clients against the built-in chain, for what it supports.
With GATEWAY_IPC_PATH (the gateway's --ipc socket): web3.py's IPCProvider
(chain id, block number, balance, a batch; compared with anvil's in proxy
mode) and AsyncIPCProvider's newHeads subscription, unsubscribed after.

Prints one line per check and a closing "N passed, M failed"; exits 1 on any
failure.
"""

import asyncio
import json
import sys
import urllib.request

from web3 import Web3

KEY0 = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
ACCOUNT0 = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
ACCOUNT1 = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
# A contract whose every call emits LOG1(topic 1, data 42).
EMITTER = "0x600d600c600039600d6000f3602a600052600160206000a100"

passed, failed = 0, 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    web3/{name}")
    else:
        failed += 1
        print(f"FAIL  web3/{name} {detail}")


def same(name, got, want):
    check(name, got == want, f"\n  gateway: {got!r}\n  node:    {want!r}")


def raw(url, body):
    """POSTs a JSON text; the parsed reply."""
    req = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def send_value(w3, nonce, to, value):
    tx = {
        "to": to,
        "value": value,
        "gas": 21000,
        "maxFeePerGas": w3.eth.gas_price * 2,
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        "nonce": nonce,
        "chainId": w3.eth.chain_id,
        "type": 2,
    }
    signed = w3.eth.account.sign_transaction(tx, KEY0)
    h = w3.eth.send_raw_transaction(signed.raw_transaction)
    return w3.eth.wait_for_transaction_receipt(h, timeout=30)


def proxy(gw_url, node_url):
    g = Web3(Web3.HTTPProvider(gw_url))
    n = Web3(Web3.HTTPProvider(node_url))
    same("chain_id", g.eth.chain_id, n.eth.chain_id)
    same("block_number", g.eth.block_number, n.eth.block_number)
    same("get_balance", g.eth.get_balance(ACCOUNT0), n.eth.get_balance(ACCOUNT0))
    same("gas_price", g.eth.gas_price, n.eth.gas_price)
    same("client_version", g.client_version, n.client_version)

    # A value transfer, sent through the gateway.
    nonce = g.eth.get_transaction_count(ACCOUNT0)
    same("nonce", nonce, n.eth.get_transaction_count(ACCOUNT0))
    receipt = send_value(g, nonce, ACCOUNT1, 10**18)
    check("transfer status", receipt.status == 1, receipt)
    h = receipt.transactionHash
    same("transfer receipt", receipt, n.eth.get_transaction_receipt(h))
    same("transfer tx", g.eth.get_transaction(h), n.eth.get_transaction(h))
    same("balance after", g.eth.get_balance(ACCOUNT1), n.eth.get_balance(ACCOUNT1))

    # Deploy the emitter, call it once, read its log.
    tx = {
        "data": EMITTER,
        "gas": 100000,
        "maxFeePerGas": g.eth.gas_price * 2,
        "maxPriorityFeePerGas": g.eth.max_priority_fee,
        "nonce": nonce + 1,
        "chainId": g.eth.chain_id,
    }
    signed = g.eth.account.sign_transaction(tx, KEY0)
    deployed = g.eth.wait_for_transaction_receipt(
        g.eth.send_raw_transaction(signed.raw_transaction), timeout=30
    )
    address = deployed.contractAddress
    check("deploy", deployed.status == 1 and address is not None, deployed)
    same("deploy receipt", deployed, n.eth.get_transaction_receipt(deployed.transactionHash))
    same("get_code", g.eth.get_code(address), n.eth.get_code(address))
    same("eth_call", g.eth.call({"to": address}), n.eth.call({"to": address}))
    same("estimate_gas", g.eth.estimate_gas({"to": address, "from": ACCOUNT0}),
         n.eth.estimate_gas({"to": address, "from": ACCOUNT0}))
    tx = {
        "to": address,
        "gas": 100000,
        "maxFeePerGas": g.eth.gas_price * 2,
        "maxPriorityFeePerGas": g.eth.max_priority_fee,
        "nonce": nonce + 2,
        "chainId": g.eth.chain_id,
    }
    signed = g.eth.account.sign_transaction(tx, KEY0)
    called = g.eth.wait_for_transaction_receipt(
        g.eth.send_raw_transaction(signed.raw_transaction), timeout=30
    )
    check("event emitted", len(called.logs) == 1, called)
    same("call receipt", called, n.eth.get_transaction_receipt(called.transactionHash))
    flt = {"fromBlock": 0, "toBlock": "latest", "address": address}
    logs = g.eth.get_logs(flt)
    check("one log", len(logs) == 1, logs)
    same("get_logs", logs, n.eth.get_logs(flt))
    same("block full", g.eth.get_block("latest", True), n.eth.get_block("latest", True))
    same("block by hash", g.eth.get_block(called.blockHash), n.eth.get_block(called.blockHash))
    same("fee_history", g.eth.fee_history(3, "latest", [25, 75]),
         n.eth.fee_history(3, "latest", [25, 75]))

    # A batch through web3.py's batch API.
    def batch(w3):
        with w3.batch_requests() as b:
            b.add(w3.eth.get_block(1))
            b.add(w3.eth.get_balance(ACCOUNT1))
            b.add(w3.eth.get_transaction_count(ACCOUNT0))
            b.add(w3.eth.get_transaction_receipt(h))
            return b.execute()

    same("batch", batch(g), batch(n))

    # Raw JSON, compared whole: ids of every form, a batch with errors in
    # it, an error of the node's passed through.
    for body in [
        '{"jsonrpc":"2.0","id":"a","method":"eth_getBlockByNumber","params":["0x1",true]}',
        '{"jsonrpc":"2.0","id":0,"method":"eth_getLogs","params":[{"fromBlock":"0x0"}]}',
        '[{"jsonrpc":"2.0","id":null,"method":"eth_blockNumber"},'
        ' {"jsonrpc":"2.0","id":9007199254740993,"method":"eth_getBalance","params":["0xbad","latest"]},'
        ' {"jsonrpc":"2.0","id":"x","method":"eth_call","params":[{"to":"%s","data":"0x"},"latest"]}]' % address,
        '{"jsonrpc":"2.0","id":7,"method":"eth_sendRawTransaction","params":["0x02"]}',
        '{"jsonrpc":"2.0","id":8,"method":"eth_getTransactionCount","params":["%s","0xffffff"]}' % ACCOUNT0,
    ]:
        same("raw " + body[:60], raw(gw_url, body), raw(node_url, body))
    # Ids anvil itself refuses (a fraction, past 2^64) are the gateway's to
    # echo: the node only ever sees the gateway's own ids.
    body = ('[{"jsonrpc":"2.0","id":1.5e3,"method":"eth_chainId"},'
            '{"jsonrpc":"2.0","id":18446744073709551616,"method":"eth_blockNumber"}]')
    text = urllib.request.urlopen(urllib.request.Request(
        gw_url, data=body.encode(), headers={"Content-Type": "application/json"})).read().decode()
    check("ids echoed byte for byte", '"id":1.5e3,' in text and '"id":18446744073709551616,' in text, text)

    asyncio.run(subscription(gw_url.replace("http://", "ws://"), g, nonce + 3))


async def subscription(ws_url, w3, nonce):
    import websockets

    async with websockets.connect(ws_url) as ws:
        await ws.send('{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}')
        sub = json.loads(await ws.recv())["result"]
        await ws.send("{this is not json")
        bad = json.loads(await ws.recv())
        check("ws bad frame -32700", bad["error"]["code"] == -32700, bad)
        receipt = await asyncio.to_thread(send_value, w3, nonce, ACCOUNT1, 1)
        note = json.loads(await asyncio.wait_for(ws.recv(), 10))
        check("ws notification", note["params"]["subscription"] == sub, note)
        head = note["params"]["result"]
        check("ws head is the block", head["hash"] == receipt.blockHash.to_0x_hex(),
              (head["hash"], receipt.blockHash.to_0x_hex()))
        await ws.send('{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":["%s"]}' % sub)
        check("ws unsubscribe", json.loads(await ws.recv())["result"] is True)


def ipc(path, node_url, gw_url):
    """web3.py over the gateway's --ipc socket; `node_url` (anvil) to compare
    with, or None on the built-in chain (a transfer through `gw_url` makes
    its block)."""
    g = Web3(Web3.IPCProvider(path, timeout=30))
    check("ipc is_connected", g.is_connected())
    if node_url:
        n = Web3(Web3.HTTPProvider(node_url))
        same("ipc chain_id", g.eth.chain_id, n.eth.chain_id)
        same("ipc block_number", g.eth.block_number, n.eth.block_number)
        same("ipc get_balance", g.eth.get_balance(ACCOUNT0), n.eth.get_balance(ACCOUNT0))
    else:
        n = None
        check("ipc chain_id", g.eth.chain_id == 31337, g.eth.chain_id)
        http = Web3(Web3.HTTPProvider(gw_url))
        same("ipc block_number", g.eth.block_number, http.eth.block_number)
        same("ipc get_balance", g.eth.get_balance(ACCOUNT0), http.eth.get_balance(ACCOUNT0))

    def batch(w3):
        with w3.batch_requests() as b:
            b.add(w3.eth.get_block(0))
            b.add(w3.eth.get_balance(ACCOUNT1))
            b.add(w3.eth.get_transaction_count(ACCOUNT0))
            return b.execute()

    got = batch(g)
    if n:
        same("ipc batch", got, batch(n))
    else:
        same("ipc batch", got, batch(http))
    asyncio.run(ipc_subscription(path, node_url, gw_url))


async def ipc_subscription(path, node_url, gw_url):
    from web3 import AsyncIPCProvider, AsyncWeb3

    async with AsyncWeb3(AsyncIPCProvider(path)) as w3:
        same("async ipc chain_id", await w3.eth.chain_id, 31337)
        sub = await w3.eth.subscribe("newHeads")
        check("async ipc eth_subscribe newHeads", isinstance(sub, str) and sub.startswith("0x"), sub)
        # A block: anvil mines one on request; the built-in chain mines one
        # per transaction.
        if node_url:
            mined = await asyncio.to_thread(raw, node_url, '{"jsonrpc":"2.0","id":1,"method":"evm_mine"}')
            check("evm_mine", mined.get("result") is not None, mined)
            head = await asyncio.to_thread(lambda: Web3(Web3.HTTPProvider(node_url)).eth.get_block("latest"))
        else:
            g = Web3(Web3.HTTPProvider(gw_url))
            nonce = await asyncio.to_thread(g.eth.get_transaction_count, ACCOUNT0)
            receipt = await asyncio.to_thread(send_value, g, nonce, ACCOUNT1, 1)
            head = await asyncio.to_thread(g.eth.get_block, receipt.blockNumber)

        async def first():
            async for message in w3.socket.process_subscriptions():
                return message

        message = await asyncio.wait_for(first(), 15)
        check("async ipc notification", message["subscription"] == sub, message)
        got = message["result"]
        check("async ipc head is the block", got["hash"] == head["hash"] and got["number"] == head["number"],
              (got.get("hash"), head["hash"]))
        check("async ipc eth_unsubscribe", await w3.eth.unsubscribe(sub) is True)


def builtin(gw_url):
    g = Web3(Web3.HTTPProvider(gw_url))
    check("chain_id", g.eth.chain_id == 31337, g.eth.chain_id)
    start = g.eth.block_number
    before = g.eth.get_balance(ACCOUNT1)
    check("balance", g.eth.get_balance(ACCOUNT0) > 0)
    nonce = g.eth.get_transaction_count(ACCOUNT0)
    receipt = send_value(g, nonce, ACCOUNT1, 10**18)
    check("transfer status", receipt.status == 1, receipt)
    check("new block", g.eth.block_number == start + 1)
    check("balance after", g.eth.get_balance(ACCOUNT1) == before + 10**18)
    tx = g.eth.get_transaction(receipt.transactionHash)
    check("tx from", tx["from"] == ACCOUNT0, tx)
    block = g.eth.get_block(receipt.blockNumber, True)
    check("block has it", block.transactions[0].hash == receipt.transactionHash)
    with g.batch_requests() as b:
        b.add(g.eth.get_block("latest"))
        b.add(g.eth.get_balance(ACCOUNT1))
        b.add(g.eth.get_transaction_count(ACCOUNT0))
        got = b.execute()
    check("batch", got[1] == before + 10**18 and got[2] == nonce + 1, got)
    check("get_logs empty", g.eth.get_logs({"fromBlock": 0}) == [])
    # geth's filters, as web3.py polls them: a block filter and a pending
    # transaction filter see the next transfer; uninstalled once.
    blocks = g.eth.filter("latest")
    pending = g.eth.filter("pending")
    receipt = send_value(g, nonce + 1, ACCOUNT1, 1)
    check("block filter", blocks.get_new_entries() == [receipt.blockHash], receipt.blockHash)
    check("pending filter", pending.get_new_entries() == [receipt.transactionHash], receipt.transactionHash)
    check("block filter: nothing new", blocks.get_new_entries() == [])
    events = g.eth.filter({"fromBlock": 0, "address": ACCOUNT1})
    check("log filter: get_all_entries (transfers emit none)", events.get_all_entries() == [])
    check("uninstall_filter", g.eth.uninstall_filter(blocks.filter_id) is True)
    check("uninstall_filter again", g.eth.uninstall_filter(blocks.filter_id) is False)
    # The tutorials' way: the node's accounts, and eth_sendTransaction that
    # the node signs for them (as anvil does for its dev accounts).
    check("accounts", g.eth.accounts[:2] == [ACCOUNT0, ACCOUNT1], g.eth.accounts)
    before = g.eth.get_balance(ACCOUNT1)
    h = g.eth.send_transaction({"from": g.eth.accounts[0], "to": ACCOUNT1, "value": 7})
    receipt = g.eth.wait_for_transaction_receipt(h, timeout=30)
    check("send_transaction", receipt.status == 1, receipt)
    check("send_transaction: balance", g.eth.get_balance(ACCOUNT1) == before + 7)
    tx = g.eth.get_transaction(h)
    check("send_transaction: from the account, its next nonce",
          tx["from"] == ACCOUNT0 and tx["nonce"] == nonce + 2, tx)


def run(part, *args):
    """Runs one part; a client error is a failure, not a crash, and the
    parts after it still run."""
    try:
        part(*args)
    except Exception as e:
        import traceback

        traceback.print_exc()
        check(f"{part.__name__}: no exception", False, repr(e))


if __name__ == "__main__":
    if sys.argv[1] == "proxy":
        run(proxy, sys.argv[2], sys.argv[3])
        if len(sys.argv) > 4:
            run(ipc, sys.argv[4], sys.argv[3], sys.argv[2])
    else:
        run(builtin, sys.argv[2])
        if len(sys.argv) > 3:
            run(ipc, sys.argv[3], None, sys.argv[2])
    print(f"web3: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)

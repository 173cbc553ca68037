#!/usr/bin/env bash
# Interop: the gateway example against real clients and a real node.
#
# Installs anvil, cast, viem and ethers (npm, versions pinned by
# package-lock.json) into target/interop-gateway/node_modules and web3.py
# (PyPI, pinned by requirements.txt) into a venv under
# target/interop-gateway/venv; starts anvil on a loopback port and the
# gateway in front of it; then:
#   * cast: chain-id, block-number, balance, send (a value transfer from
#     anvil's first dev account), a contract deployment (send --create), a
#     call of that contract (it emits an event), receipt, tx, logs, block,
#     eth_call, estimate, fee history: each run through the gateway and
#     against anvil, outputs compared (the same text, or the same JSON);
#   * check.py: web3.py does the same plus a batch, raw JSON is compared
#     whole (ids of every form, errors passed through), and a newHeads
#     subscription runs over WebSocket on the gateway's port;
#   * check.mjs: viem and ethers v6, the JavaScript clients most dapps and
#     scripts use, the same way: reads, a locally signed transfer and its
#     receipt, logs, their JSON-RPC batches (viem's `batch: true`, ethers'
#     default batching), viem's watchBlocks / watchBlockNumber and ethers'
#     "block" events over WebSocket on the gateway's port;
#   * the built-in chain (no upstream): the same clients, for what it
#     supports (no EVM: transfers only), with the node signing for its dev
#     accounts (cast send --unlocked, web3.py's send_transaction, ethers'
#     getSigner) and cast access-list;
#   * gzip: the gateway in front of anvil compresses every answer for
#     clients that accept gzip (--gzip 1), so the clients above read
#     compressed answers where they ask for them; curl --compressed checks
#     that answers are compressed;
#   * over each gateway's --ipc socket (geth's IPC): cast --rpc-url PATH
#     (chain-id, block-number, balance, compared with anvil's), web3.py's
#     IPCProvider (reads, a batch) and AsyncIPCProvider (a newHeads
#     subscription), ethers' IpcSocketProvider (reads, "block" events) and
#     viem's `ipc` transport from viem/node (reads, watchBlockNumber).
# Prints one line per check and "N passed, M failed"; exits 1 on any
# failure. Only package registries are used (npm, PyPI).
#
# Environment: PROFILE=release|debug (default debug), FEATURES (cargo's
# feature flags for the build, default --all-features), INTEROP_PORT (the
# first of three loopback ports, default a random one from 20000 to 31997,
# below the kernel's ephemeral range so that no outgoing connection holds
# them, and not one fixed port that a second run on the host would meet),
# CARGO_TARGET_DIR (where cargo puts the gateway, default target/).
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$PWD"
HERE="$ROOT/tests/interop/gateway"
WORK="$ROOT/target/interop-gateway"
PROFILE="${PROFILE:-debug}"
PORT="${INTEROP_PORT:-$(( 20000 + RANDOM % 11998 ))}"
ANVIL_PORT=$PORT
GW_PORT=$((PORT + 1))
CHAIN_PORT=$((PORT + 2))
mkdir -p "$WORK"

pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2> /dev/null
    done
    wait 2> /dev/null
}
trap cleanup EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok    $1"; }
fail() { failed=$((failed + 1)); echo "FAIL  $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | head -c 2000 && echo; }

echo "=== install (npm: anvil, cast, viem, ethers; PyPI: web3)"
# check.mjs runs from $WORK, beside node_modules (ES modules resolve their
# imports from their own folder up).
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/check.mjs" "$WORK/"
if ! (cd "$WORK" && npm ci --no-audit --no-fund --loglevel=error > "$WORK/npm.log" 2>&1); then
    cat "$WORK/npm.log"; echo "npm ci failed"; exit 1
fi
BIN="$WORK/node_modules/@foundry-rs"
ANVIL="$BIN/anvil-linux-amd64/bin/anvil"
CAST="$BIN/cast-linux-amd64/bin/cast"
if [ ! -x "$WORK/venv/bin/python" ]; then
    python3 -m venv "$WORK/venv" || { echo "python3 -m venv failed"; exit 1; }
fi
if ! "$WORK/venv/bin/pip" install -q --disable-pip-version-check -r "$HERE/requirements.txt" > "$WORK/pip.log" 2>&1; then
    cat "$WORK/pip.log"; echo "pip install failed"; exit 1
fi
PY="$WORK/venv/bin/python"
echo "anvil: $("$ANVIL" --version | head -1)"
echo "cast:  $("$CAST" --version | head -1)"
echo "web3:  $("$PY" -c 'import web3; print(web3.__version__)')"
echo "node:  $(node --version); viem $(node -p 'require("'"$WORK"'/node_modules/viem/package.json").version'), ethers $(node -p 'require("'"$WORK"'/node_modules/ethers/package.json").version')"

echo "=== build the gateway ($PROFILE)"
flag=(); [ "$PROFILE" = release ] && flag=(--release)
# FEATURES: `--all-features` by default, so that in CI the debug build
# reuses what `cargo test --all-features` built.
# shellcheck disable=SC2086
cargo build --quiet "${flag[@]}" ${FEATURES:---all-features} --example gateway || exit 1
GATEWAY="${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE/examples/gateway"

wait_port() {
    for _ in $(seq 1 100); do
        if (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listens on port $1"; return 1
}

"$ANVIL" --host 127.0.0.1 --port "$ANVIL_PORT" --silent > "$WORK/anvil.log" 2>&1 &
pids+=($!)
# The gateways' --ipc sockets (a socket file a killed run left is
# replaced).
GW_IPC="$WORK/gw.ipc"
CHAIN_IPC="$WORK/chain.ipc"
# --gzip 1: every answer compressed for the clients that accept gzip
# (web3.py's requests, ethers, curl --compressed), so that their checks
# read compressed answers; the built-in chain's gateway sends them plain.
"$GATEWAY" --listen "127.0.0.1:$GW_PORT" --upstream "http://127.0.0.1:$ANVIL_PORT" --ipc "$GW_IPC" --gzip 1 > "$WORK/gateway.log" 2>&1 &
pids+=($!)
"$GATEWAY" --listen "127.0.0.1:$CHAIN_PORT" --ipc "$CHAIN_IPC" > "$WORK/builtin.log" 2>&1 &
pids+=($!)
# wait_socket PATH: until a Unix socket is at PATH (the gateway binds it
# before its port is up, but a socket a killed run left may be there: the
# log line says this run's is).
wait_socket() {
    for _ in $(seq 1 100); do
        if [ -S "$1" ] && grep -q "gateway IPC on $1" "$2"; then return 0; fi
        sleep 0.1
    done
    echo "no socket at $1"; return 1
}
if ! { wait_port "$ANVIL_PORT" && wait_port "$GW_PORT" && wait_port "$CHAIN_PORT" \
    && wait_socket "$GW_IPC" "$WORK/gateway.log" && wait_socket "$CHAIN_IPC" "$WORK/builtin.log"; }; then
    tail -n 5 "$WORK/anvil.log" "$WORK/gateway.log" "$WORK/builtin.log"
    exit 1
fi
GW="http://127.0.0.1:$GW_PORT"
NODE="http://127.0.0.1:$ANVIL_PORT"
CHAIN="http://127.0.0.1:$CHAIN_PORT"
KEY0=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80
ACCOUNT0=0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266
ACCOUNT1=0x70997970C51812dc3A010C7d01b50e0d17dc79C8
EMITTER=0x600d600c600039600d6000f3602a600052600160206000a100

# same NAME ARGS...: `cast ARGS -r GATEWAY` and `cast ARGS -r ANVIL` both
# succeed and print the same (JSON compared as JSON).
same() { compare 0 "$@"; }
# same_error NAME ARGS...: both fail, with the same message (the node's
# error passed through).
same_error() { compare 1 "$@"; }
# compare FAILS NAME ARGS...: `same` (FAILS 0) or `same_error` (FAILS 1).
compare() {
    local fails=$1 name=$2; shift 2
    local g n
    g=$("$CAST" "$@" -r "$GW" 2>&1); local gs=$?
    n=$("$CAST" "$@" -r "$NODE" 2>&1); local ns=$?
    if [ $gs -eq $ns ] && [ $((gs != 0)) = "$fails" ] && "$PY" -c '
import json, sys
a, b = sys.argv[1], sys.argv[2]
try:
    sys.exit(0 if json.loads(a) == json.loads(b) else 1)
except ValueError:
    sys.exit(0 if a == b else 1)' "$g" "$n"; then
        ok "cast/$name"
    else
        fail "cast/$name" "gateway ($gs): $g
anvil ($ns):   $n"
    fi
}

# tally NAME STATUS LOG: adds the counts of a client run's closing line
# ("N passed, M failed") to ours; a run that ended without one (a crash, a
# timeout), passed nothing, or exited non-zero with no failure counted is
# one failure.
tally() {
    local line p f
    line=$(tail -n 1 "$3")
    p=$(echo "$line" | sed -n 's/.* \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    f=$(echo "$line" | sed -n 's/.* \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ -z "$p" ] || [ "$p" = 0 ] || { [ "$2" -ne 0 ] && [ "${f:-0}" = 0 ]; }; then
        fail "$1 (exit $2)"
    fi
}

# js MODE URL...: check.mjs (viem, ethers), bounded in time.
js() {
    local log="$WORK/js-$1.log"
    (cd "$WORK" && timeout 150 node check.mjs "$@") > "$log" 2>&1
    local status=$?
    cat "$log"
    tally "js $1 run" $status "$log"
}

# field JSON KEY: a member of a JSON object.
field() { "$PY" -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2]) or "")' "$1" "$2"; }

echo "=== cast through the gateway, compared with anvil"
same chain-id chain-id
same block-number block-number
same balance balance "$ACCOUNT0"
same gas-price gas-price
same nonce nonce "$ACCOUNT0"
out=$("$CAST" send --json --private-key "$KEY0" -r "$GW" "$ACCOUNT1" --value 1ether 2>&1)
tx=$(field "$out" transactionHash)
[ "$(field "$out" status)" = 0x1 ] && ok "cast/send (value transfer)" || fail "cast/send" "$out"
same receipt receipt --json "$tx"
same tx tx --json "$tx"
same balance-after balance "$ACCOUNT1"
out=$("$CAST" send --json --private-key "$KEY0" -r "$GW" --create "$EMITTER" 2>&1)
contract=$(field "$out" contractAddress)
[ "$(field "$out" status)" = 0x1 ] && [ -n "$contract" ] && ok "cast/send --create (deployment)" \
    || fail "cast/send --create" "$out"
same deploy-receipt receipt --json "$(field "$out" transactionHash)"
same code code "$contract"
same call call "$contract"
same estimate estimate "$contract"
out=$("$CAST" send --json --private-key "$KEY0" -r "$GW" "$contract" 2>&1)
calltx=$(field "$out" transactionHash)
[ "$(field "$out" status)" = 0x1 ] && ok "cast/send (a call that emits an event)" || fail "cast/send call" "$out"
same call-receipt receipt --json "$calltx"
same logs logs --json --from-block 0 --address "$contract"
logs=$("$CAST" logs --json --from-block 0 --address "$contract" -r "$GW" 2>&1)
[ "$("$PY" -c 'import json,sys; print(len(json.loads(sys.argv[1])))' "$logs" 2> /dev/null)" = 1 ] \
    && ok "cast/logs: one event" || fail "cast/logs: one event" "$logs"
same block-latest block latest --json
same block-1-full block 1 --full --json
same fee-history rpc eth_feeHistory 0x4 latest '[25,75]'
same client-version client
same_error error-passthrough rpc eth_getTransactionCount "$ACCOUNT0" 0xffffff
# Over WebSocket on the gateway's own port.
g=$("$CAST" block-number -r "ws://127.0.0.1:$GW_PORT" 2>&1); n=$("$CAST" block-number -r "$NODE" 2>&1)
[ "$g" = "$n" ] && ok "cast/block-number over ws://" || fail "cast/block-number over ws://" "$g / $n"
# gzip (--gzip 1): curl --compressed gets a compressed answer and reads it
# as anvil's.
head=$(curl -sS --compressed -D - -o "$WORK/gzip.json" -H 'content-type: application/json' \
    --data-binary '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x1",true]}' "$GW" 2>&1)
want=$(curl -sS -H 'content-type: application/json' \
    --data-binary '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x1",true]}' "$NODE" 2>&1)
if printf '%s' "$head" | grep -qi '^content-encoding: gzip' \
    && "$PY" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.loads(sys.argv[2]))' \
        "$WORK/gzip.json" "$want"; then
    ok "curl --compressed: gzip answer, anvil's block"
else
    fail "curl --compressed: gzip answer, anvil's block" "$head $(head -c 300 "$WORK/gzip.json")"
fi
# Over the gateway's --ipc socket: cast takes a path as its RPC URL.
same_ipc() {
    local name=$1; shift
    local g n
    g=$("$CAST" "$@" -r "$GW_IPC" 2>&1); local gs=$?
    n=$("$CAST" "$@" -r "$NODE" 2>&1); local ns=$?
    if [ $gs -eq 0 ] && [ $gs -eq $ns ] && [ "$g" = "$n" ]; then
        ok "cast/$name over ipc"
    else
        fail "cast/$name over ipc" "gateway ($gs): $g
anvil ($ns):   $n"
    fi
}
same_ipc chain-id chain-id
same_ipc block-number block-number
same_ipc balance balance "$ACCOUNT0"
# Policy: denied namespaces never reach the node.
out=$("$CAST" rpc debug_traceTransaction "$tx" -r "$GW" 2>&1)
echo "$out" | grep -q -- "-32601" && ok "cast/debug_ denied" || fail "cast/debug_ denied" "$out"

echo "=== web3.py through the gateway, compared with anvil"
"$PY" "$HERE/check.py" proxy "$GW" "$NODE" "$GW_IPC" > "$WORK/web3-proxy.log" 2>&1
web3_status=$?
cat "$WORK/web3-proxy.log"
tally "web3 proxy run" $web3_status "$WORK/web3-proxy.log"

echo "=== viem and ethers through the gateway, compared with anvil"
js proxy "$GW" "$NODE" "$GW_IPC"

echo "=== cast against the built-in chain"
c() { "$CAST" "$@" -r "$CHAIN" 2>&1; }
[ "$(c chain-id)" = 31337 ] && ok "builtin/chain-id" || fail "builtin/chain-id" "$(c chain-id)"
start=$(c block-number)
[[ "$start" =~ ^[0-9]+$ ]] && ok "builtin/block-number ($start)" || fail "builtin/block-number" "$start"
[ "$(c balance "$ACCOUNT0")" = 10000000000000000000000 ] && ok "builtin/balance" \
    || fail "builtin/balance" "$(c balance "$ACCOUNT0")"
out=$("$CAST" send --json --private-key "$KEY0" -r "$CHAIN" "$ACCOUNT1" --value 1ether 2>&1)
tx=$(field "$out" transactionHash)
[ "$(field "$out" status)" = 0x1 ] && ok "builtin/send" || fail "builtin/send" "$out"
out=$("$CAST" send --legacy --json --private-key "$KEY0" -r "$CHAIN" "$ACCOUNT1" --value 1 2>&1)
[ "$(field "$out" status)" = 0x1 ] && ok "builtin/send --legacy" || fail "builtin/send --legacy" "$out"
r=$(c receipt --json "$tx")
[ "$(field "$r" transactionHash)" = "$tx" ] && [ "$(field "$r" gasUsed)" = 0x5208 ] \
    && ok "builtin/receipt" || fail "builtin/receipt" "$r"
[ "$(c balance "$ACCOUNT1")" = 10001000000000000000001 ] && ok "builtin/balance after" \
    || fail "builtin/balance after" "$(c balance "$ACCOUNT1")"
[ "$(c block-number)" = $((start + 2)) ] && ok "builtin/a block per transaction" \
    || fail "builtin/a block per transaction" "$(c block-number)"
# foundry's unlocked sends (eth_sendTransaction, signed by the node for
# its dev accounts, as anvil does) and `cast access-list`.
out=$("$CAST" send --json --unlocked --from "$ACCOUNT0" -r "$CHAIN" "$ACCOUNT1" --value 1 2>&1)
[ "$(field "$out" status)" = 0x1 ] && ok "builtin/send --unlocked" || fail "builtin/send --unlocked" "$out"
out=$(c access-list --from "$ACCOUNT0" "$ACCOUNT1")
echo "$out" | grep -q "gas used: 21000" && ok "builtin/access-list" || fail "builtin/access-list" "$out"
out=$("$CAST" send --json --private-key "$KEY0" -r "$CHAIN" --create "$EMITTER" 2>&1)
echo "$out" | grep -q "not supported by the built-in chain" && ok "builtin/deployment refused clearly" \
    || fail "builtin/deployment refused clearly" "$out"
# Over its --ipc socket: the same answers as over HTTP.
for args in chain-id block-number "balance $ACCOUNT1"; do
    # shellcheck disable=SC2086
    i=$("$CAST" $args -r "$CHAIN_IPC" 2>&1); is=$?; h=$(c $args); hs=$?
    [ $is -eq 0 ] && [ $hs -eq 0 ] && [ -n "$i" ] && [ "$i" = "$h" ] && ok "builtin/${args%% *} over ipc" || fail "builtin/${args%% *} over ipc" "ipc: $i / http: $h"
done

echo "=== web3.py against the built-in chain"
"$PY" "$HERE/check.py" builtin "$CHAIN" "$CHAIN_IPC" > "$WORK/web3-builtin.log" 2>&1
web3_status=$?
cat "$WORK/web3-builtin.log"
tally "web3 builtin run" $web3_status "$WORK/web3-builtin.log"

echo "=== viem and ethers against the built-in chain"
js builtin "$CHAIN" "$CHAIN_IPC"

echo "interop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

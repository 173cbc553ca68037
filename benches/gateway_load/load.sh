#!/usr/bin/env bash
# Load test (loopback only, about 85 s): the gateway in front of anvil,
# against anvil alone and against a plain TCP relay (socat) in front of the
# same anvil. Same client (wrk, one thread), at two concurrencies: 1
# connection (latency: nothing queues) and 16 (saturation: the three
# processes and wrk share the machine's cores). Runs alternated: anvil,
# relay, gateway, three rounds each. Reports requests/s, p50/p99 latency,
# and the gateway's own CPU time per forwarded request, user and kernel
# apart (from /proc/<pid>/stat), and the relay's (its reaped children).
#
# Needs: wrk and socat (Debian; installed if missing), anvil (from
# tests/interop/gateway/run.sh's install, or ANVIL=path), the gateway built
# in release (GATEWAY=path, or it is built).
# Environment: CONCURRENCY (default "1 16"), SECONDS_PER_RUN (default 4),
# ROUNDS (default 3), LOAD_PORT (first of three ports, default 29545,
# below the ephemeral range),
# GATEWAY_ARGS (more gateway options, e.g. "--threads 1" or
# "--client hyper").
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
CONCURRENCY="${CONCURRENCY:-1 16}"
D="${SECONDS_PER_RUN:-4}"
ROUNDS="${ROUNDS:-3}"
PORT="${LOAD_PORT:-29545}"
ANVIL="${ANVIL:-$ROOT/target/interop-gateway/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil}"
GATEWAY="${GATEWAY:-$ROOT/target/release/examples/gateway}"
LUA="$ROOT/benches/gateway_load/request.lua"

for tool in wrk socat; do
    if ! command -v "$tool" > /dev/null; then
        apt-get install -y -q wrk socat > /dev/null 2>&1 \
            || { apt-get update -q > /dev/null 2>&1 && apt-get install -y -q wrk socat > /dev/null 2>&1; }
    fi
done
[ -x "$ANVIL" ] || { echo "no anvil at $ANVIL: run tests/interop/gateway/run.sh first, or set ANVIL"; exit 1; }
if [ ! -x "$GATEWAY" ]; then
    cargo build --quiet --release --features gateway --example gateway
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT
wait_port() {
    for _ in $(seq 1 100); do
        (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on $1"; exit 1
}

"$ANVIL" --host 127.0.0.1 --port "$PORT" --silent > /dev/null 2>&1 &
pids+=($!)
# shellcheck disable=SC2086
"$GATEWAY" --listen "127.0.0.1:$((PORT + 1))" --upstream "http://127.0.0.1:$PORT" ${GATEWAY_ARGS:-} 2> /dev/null &
GW_PID=$!
pids+=($GW_PID)
socat "TCP-LISTEN:$((PORT + 2)),bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$PORT" &
RELAY_PID=$!
pids+=($RELAY_PID)
for p in "$PORT" $((PORT + 1)) $((PORT + 2)); do wait_port "$p"; done

TICK=$(getconf CLK_TCK)
# cpu PID: "user system" in ticks, the process and its reaped children.
cpu() { awk '{print $14 + $16, $15 + $17}' "/proc/$1/stat"; }

declare -A URL=([anvil]="http://127.0.0.1:$PORT" [gateway]="http://127.0.0.1:$((PORT + 1))" [relay]="http://127.0.0.1:$((PORT + 2))")
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
STATUS=0
for C in $CONCURRENCY; do
echo
echo "== wrk -t1 -c$C -d${D}s, eth_blockNumber and eth_getBalance alternated; $ROUNDS rounds; gateway ${GATEWAY_ARGS:-(defaults)}"
for t in anvil relay gateway; do wrk -t1 -c"$C" -d1s -s "$LUA" "${URL[$t]}" > /dev/null; done

printf '%-8s %-6s %10s %9s %9s %6s %14s %14s\n' target round req/s p50_us p99_us bad user_us/req sys_us/req
RESULTS=$(mktemp)
for round in $(seq 1 "$ROUNDS"); do
    for t in anvil relay gateway; do
        pid=""
        [ "$t" = gateway ] && pid=$GW_PID
        [ "$t" = relay ] && pid=$RELAY_PID
        [ -n "$pid" ] && read -r u0 s0 < <(cpu "$pid")
        out=$(wrk -t1 -c"$C" -d"${D}s" -s "$LUA" "${URL[$t]}")
        sleep 0.3 # the relay's children exit and are reaped
        reqs=$(awk '/^requests /{print $2}' <<< "$out")
        rps=$(awk '/^Requests\/sec:/{print $2}' <<< "$out")
        p50=$(awk '/^p50_us /{print $2}' <<< "$out")
        p99=$(awk '/^p99_us /{print $2}' <<< "$out")
        bad=$(awk '/^bad /{print $2}' <<< "$out")
        user=- sys=-
        if [ -n "$pid" ]; then
            read -r u1 s1 < <(cpu "$pid")
            user=$(awk -v d=$((u1 - u0)) -v n="$reqs" -v t="$TICK" 'BEGIN{printf "%.2f", d * 1e6 / t / n}')
            sys=$(awk -v d=$((s1 - s0)) -v n="$reqs" -v t="$TICK" 'BEGIN{printf "%.2f", d * 1e6 / t / n}')
        fi
        printf '%-8s %-6s %10s %9s %9s %6s %14s %14s\n' "$t" "$round" "$rps" "$p50" "$p99" "$bad" "$user" "$sys" | tee -a "$RESULTS"
    done
done
echo "medians over the rounds, $C connection(s) (added p50 = target p50 - anvil p50):"
for t in anvil relay gateway; do
    awk -v t="$t" '$1 == t {print $3, $4, $5, $7, $8}' "$RESULTS" > "$RESULTS.$t"
done
anvil_p50=$(awk '{print $2}' "$RESULTS.anvil" | median)
for t in anvil relay gateway; do
    rps=$(awk '{print $1}' "$RESULTS.$t" | median)
    p50=$(awk '{print $2}' "$RESULTS.$t" | median)
    p99=$(awk '{print $3}' "$RESULTS.$t" | median)
    user=$(awk '{print $4}' "$RESULTS.$t" | median)
    sys=$(awk '{print $5}' "$RESULTS.$t" | median)
    printf '%-8s req/s %9s  p50 %6s us (added %5s)  p99 %6s us  cpu/req user %s us, sys %s us\n' \
        "$t" "$rps" "$p50" "$((p50 - anvil_p50))" "$p99" "$user" "$sys"
done
if awk '$6 != 0 {bad = 1} END {exit !bad}' "$RESULTS"; then
    echo "some replies were not results"; STATUS=1
fi
done
exit $STATUS

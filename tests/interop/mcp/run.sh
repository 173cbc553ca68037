#!/usr/bin/env bash
# Interop: the official MCP SDK clients (Python `mcp`, TypeScript
# `@modelcontextprotocol/sdk`, versions pinned here and in package-lock.json)
# drive examples/mcp_server over stdio and Streamable HTTP. Installs the
# clients from PyPI and npm into target/ and node_modules/, builds the
# example, runs every client over both transports, exits non-zero on any
# failure. Called by .ci/run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cd "$root"

PY_MCP_VERSION="2.3.0"
venv="$root/target/mcp-interop/venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$PY_MCP_VERSION'" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$PY_MCP_VERSION"
fi
(cd "$here" && npm ci --no-audit --no-fund --silent)

# A debug build with every feature: what `cargo test --all-features` built
# already, so CI compiles nothing new here (in CARGO_TARGET_DIR when that is
# set, as cargo puts it there).
cargo build --quiet --all-features --example mcp_server
server="${CARGO_TARGET_DIR:-$root/target}/debug/examples/mcp_server"

# Below the kernel's ephemeral range (32768 and up), which outgoing
# connections draw from.
port=$(( 20000 + RANDOM % 12000 ))
url="http://127.0.0.1:$port/mcp"
"$server" --http "127.0.0.1:$port" 2> "$root/target/mcp-interop/http-server.log" &
http_pid=$!
trap 'kill "$http_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.1
done

passed=0
failed=0
run() {
    echo "=== $*"
    if timeout 120 "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $*"; fi
}
run "$venv/bin/python" "$here/client.py" "$server" stdio - auto
run "$venv/bin/python" "$here/client.py" "$server" stdio - legacy
run "$venv/bin/python" "$here/client.py" - http "$url" auto
run "$venv/bin/python" "$here/client.py" - http "$url" legacy
run node "$here/client.mjs" "$server" stdio -
run node "$here/client.mjs" - http "$url"

echo "mcp interop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

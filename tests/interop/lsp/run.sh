#!/usr/bin/env bash
# Interop: vscode-jsonrpc (npm, the JSON-RPC library under VS Code's
# language clients; version pinned here and in package-lock.json) drives
# examples/lsp_server over the child's stdin/stdout with LSP framing:
# initialize, document sync, a server-to-client workspace/configuration
# request answered by the client, window/logMessage notifications,
# $/cancelRequest answered with -32800, the server's own $/cancelRequest
# for a workspace/configuration it gave up on (its timeout, or the client
# cancelled the call waiting for it), shutdown and exit (status 0).
#
# Installs the npm package into target/interop-lsp/node_modules (nothing is
# written under tests/), builds the example, runs check.mjs, exits non-zero
# on any failed check. Only the npm registry is used. Called by .ci/run.
#
# Environment: FEATURES (cargo's feature flags for the build, default
# --all-features, so that in CI it reuses what `cargo test --all-features`
# built), CARGO_TARGET_DIR (where cargo puts the example, default target/).
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$PWD"
HERE="$ROOT/tests/interop/lsp"
WORK="$ROOT/target/interop-lsp"
mkdir -p "$WORK"

echo "=== install (npm: vscode-jsonrpc)"
# check.mjs runs from $WORK, beside node_modules (ES modules resolve their
# imports from their own folder up).
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/check.mjs" "$WORK/"
if ! (cd "$WORK" && npm ci --no-audit --no-fund --loglevel=error > "$WORK/npm.log" 2>&1); then
    cat "$WORK/npm.log"; echo "npm ci failed"; exit 1
fi

echo "=== build examples/lsp_server"
# shellcheck disable=SC2086
cargo build --quiet ${FEATURES:---all-features} --example lsp_server
SERVER="${CARGO_TARGET_DIR:-$ROOT/target}/debug/examples/lsp_server"

echo "=== check.mjs (server log: $WORK/server.log)"
status=0
timeout 120 node "$WORK/check.mjs" "$SERVER" 2> "$WORK/server.log" || status=$?
if [ "$status" -ne 0 ]; then
    echo "--- server log (last 40 lines)"
    tail -n 40 "$WORK/server.log"
    echo "lsp interop: FAILED (status $status)"
    exit 1
fi
echo "lsp interop: passed"

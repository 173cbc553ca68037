"""Drives the example MCP server with the official Python SDK client.

usage: client.py SERVER_BINARY (stdio|http URL) (auto|legacy)

`auto` lets the client probe `server/discover` (2026-07-28) and fall back to
`initialize`; `legacy` forces the `initialize` handshake. Prints one line per
check and the revision negotiated; exits non-zero on the first failure.
"""

import sys
import time
import warnings

import anyio
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CreateMessageResult, TextContent

# The logging feature, ping and setLevel are deprecated by 2026-07-28; the
# legacy runs use them on purpose.
warnings.filterwarnings("ignore", message=".*deprecated.*")
warnings.filterwarnings("ignore", message=".*removed as of 2026-07-28.*")

FAILURES = []

# The question the client's model takes far longer to answer than the tool
# waits for it.
SLOW_QUESTION = "a slow question"
SLOW_MODEL_SECONDS = 10
CANCEL_BOUND_SECONDS = 5


def check(name, ok, detail=""):
    print(f"  {'ok ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail and not ok else ''}", flush=True)
    if not ok:
        FAILURES.append(name)


async def expect_error(coro):
    """Runs a call that must fail with a JSON-RPC error; returns (code, data)."""
    try:
        result = await coro
    except MCPError as e:
        return e.error.code, e.error.data, None
    return None, None, result


async def run(binary, transport, url, mode):
    if transport == "stdio":
        target = StdioServerParameters(command=binary, args=[])
    else:
        target = url
    logs = []

    async def on_log(params):
        logs.append(params)

    samples = []
    # The slow model's fate: when it started, how it ended ("cancelled" or
    # "answered") and when, set once the handler is done.
    slow = {}
    slow_done = anyio.Event()

    async def on_sample(context, params):
        # The client's "model": echoes the question it was asked.
        question = params.messages[0].content.text
        if question == SLOW_QUESTION:
            # A model far slower than the tool waits: the server gives up
            # and sends notifications/cancelled; the SDK (its default
            # "interrupt" mode) cancels this handler's scope.
            slow["started"] = time.monotonic()
            try:
                await anyio.sleep(SLOW_MODEL_SECONDS)
                slow["outcome"] = "answered"
            except anyio.get_cancelled_exc_class():
                slow["outcome"] = "cancelled"
                raise
            finally:
                slow["ended"] = time.monotonic()
                slow_done.set()
            return CreateMessageResult(role="assistant", content=TextContent(type="text", text="too late"),
                                       model="interop-model", stop_reason="endTurn")
        samples.append(question)
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text=f"echo: {question}"),
                                   model="interop-model", stop_reason="endTurn")

    async with Client(target, mode=mode, logging_callback=on_log, sampling_callback=on_sample,
                      log_level="debug" if mode == "auto" else None) as client:
        version = client.protocol_version
        print(f"python mcp client, transport={transport}, mode={mode}: negotiated protocol revision {version}", flush=True)
        check("revision", version in ("2026-07-28", "2025-11-25"), version)
        if mode == "auto":
            check("auto mode negotiates 2026-07-28", version == "2026-07-28", version)

        tools = await client.list_tools()
        by_name = {t.name: t for t in tools.tools}
        check("tools listed", set(by_name) >= {"build-app", "lint-check", "wait"}, sorted(by_name))
        build = by_name["build-app"]
        schema = build.input_schema
        check("build-app schema: required", sorted(schema.get("required", [])) == ["arch", "project_dir"], schema)
        check("build-app schema: arch enum", schema["properties"]["arch"]["enum"] == ["arm64", "x86_64"], schema)
        check("build-app schema: configuration enum",
              schema["properties"]["configuration"]["enum"] == ["Debug", "Release"], schema)
        check("build-app outputSchema", build.output_schema is not None and build.output_schema["type"] == "object")
        check("lint-check schema", by_name["lint-check"].input_schema.get("type") == "object")

        # Good arguments, with progress.
        progress = []

        async def on_progress(value, total, message):
            progress.append(value)

        result = await client.call_tool(
            "build-app",
            {"project_dir": "/tmp/app", "configuration": "Release", "arch": "arm64"},
            progress_callback=on_progress,
        )
        sc = result.structured_content or {}
        check("build-app result", not result.is_error and sc.get("status") == "ok"
              and sc.get("arch") == "arm64" and sc.get("configuration") == "Release", result)
        check("build-app text mirror", any(isinstance(c, TextContent) and '"status"' in c.text for c in result.content))
        check("progress received", len(progress) >= 1, progress)
        check("progress increasing", all(a < b for a, b in zip(progress, progress[1:])), progress)
        print(f"    progress seen: {progress}", flush=True)
        if mode == "auto":
            check("log messages received (logLevel in _meta)", len(logs) >= 1, logs)
        print(f"    log messages seen: {len(logs)}", flush=True)
        if mode == "legacy":
            # Level filtering: after logging/setLevel error, no info/debug.
            await client.set_logging_level("error")
            before = len(logs)
            await client.call_tool("build-app", {"project_dir": "/tmp/app", "arch": "arm64"})
            check("logging/setLevel filters", len(logs) == before, logs[before:])

        # Arguments that break the schema: from 2025-11-25 (SEP-1303) a tool
        # result with isError whose text names what to correct.
        result = await client.call_tool("build-app", {"project_dir": "/tmp/app", "arch": "ARM"})
        text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
        print(f"    arch=ARM -> isError {result.is_error}, text {text!r}", flush=True)
        check("arch=ARM is a tool error", result.is_error and result.structured_content is None, result)
        check("arch=ARM names the field and the choices",
              text.endswith('{"field":"arch","expected":["arm64","x86_64"],"received":"ARM"}'), text)

        # Missing project_dir.
        result = await client.call_tool("build-app", {"arch": "x86_64"})
        text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
        print(f"    no project_dir -> isError {result.is_error}, text {text!r}", flush=True)
        check("missing project_dir is a tool error", result.is_error, result)
        check("missing project_dir names the field", "missing required property 'project_dir'" in text, text)

        # Unknown tool.
        code, data, res = await expect_error(client.call_tool("no-such-tool", {}))
        print(f"    unknown tool -> code {code}, data {data}", flush=True)
        check("unknown tool is -32602", code == -32602, (code, res))

        # lint-check.
        result = await client.call_tool("lint-check", {})
        sc = result.structured_content or {}
        check("lint-check", not result.is_error and sc.get("files", 0) > 0 and "trailing_whitespace" in sc, result)
        print(f"    lint-check: {sc.get('files')} files, {sc.get('lines')} lines, "
              f"{sc.get('trailing_whitespace')} trailing", flush=True)

        # Cancel a slow call: the client abandons it after 300 ms.
        started = time.monotonic()
        with anyio.move_on_after(0.3) as scope:
            await client.call_tool("wait", {"ms": 20000})
        check("slow call cancelled", scope.cancelled_caught)
        # The server keeps serving after the cancellation.
        result = await client.call_tool("wait", {"ms": 10})
        check("served after cancel", not result.is_error, result)
        # The server stopped the cancelled call (the client only knows it
        # gave up): soon no other wait runs (the SDK's cancellation may
        # reach the server after the next call; the 20 s wait would run on).
        for _ in range(40):
            text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
            if "(0 other waits running)" in text:
                break
            await anyio.sleep(0.05)
            result = await client.call_tool("wait", {"ms": 10})
        check("the cancelled call was stopped", "(0 other waits running)" in text, text)
        check("cancel was prompt", time.monotonic() - started < 5)

        # The server asks the client's model (sampling): in the initialize
        # lifecycle with a request while the call runs, over both
        # transports; in 2026-07-28, which has no server-to-client requests,
        # with an input_required result the client fulfils and calls again.
        result = await client.call_tool("ask-model", {"question": "a name for the app?"})
        sc = result.structured_content or {}
        check("sampling: the tool got the client's answer", not result.is_error
              and sc.get("answer") == "echo: a name for the app?" and sc.get("model") == "interop-model", result)
        check("sampling: the client was asked once", samples == ["a name for the app?"], samples)

        # The server gives up on its own request (the tool's timeoutMs);
        # only where server-to-client requests exist (2026-07-28 answers
        # input_required and never waits).
        if version != "2026-07-28":
            result = await client.call_tool("ask-model", {"question": SLOW_QUESTION, "timeoutMs": 300})
            text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
            check("ask timeout: the tool says it gave up", result.is_error
                  and "did not answer in time" in text, result)
            # The notice precedes the tool's reply, but the handler's task
            # unwinds on its own: wait for it, far less than the model's
            # time (a hang guard, not a measurement).
            with anyio.move_on_after(CANCEL_BOUND_SECONDS):
                await slow_done.wait()
            if "ended" in slow:
                print(f"    slow model: {slow.get('outcome')} after {slow['ended'] - slow['started']:.2f} s", flush=True)
            else:
                print("    slow model: still running", flush=True)
            check("ask timeout: the client's handler was cancelled", slow.get("outcome") == "cancelled", slow)
            check("ask timeout: cancelled well before the model would answer",
                  "ended" in slow and slow["ended"] - slow["started"] < CANCEL_BOUND_SECONDS, slow)
            # The cancelled handler leaves the session usable.
            result = await client.call_tool("ask-model", {"question": "still there?", "timeoutMs": 30000})
            sc = result.structured_content or {}
            check("ask timeout: the next ask is answered", not result.is_error
                  and sc.get("answer") == "echo: still there?", result)

        # ping (deprecated by 2026-07-28, so only in the legacy runs).
        if mode == "legacy":
            try:
                pong = (await client.send_ping()).model_dump(exclude_none=True)
            except Exception as e:  # recorded as a failed check, not a crash
                pong = repr(e)
            check("ping: answered with an empty result", pong == {}, pong)


def main():
    binary, transport, url, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    anyio.run(run, binary, transport, url, mode)
    if FAILURES:
        print(f"python client ({transport}, {mode}): {len(FAILURES)} checks failed: {FAILURES}", flush=True)
        sys.exit(1)
    print(f"python client ({transport}, {mode}): all checks passed", flush=True)


if __name__ == "__main__":
    main()

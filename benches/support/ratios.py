#!/usr/bin/env python3
"""Ratios of the last criterion run: rpcwire against its peers, per group.

    cargo bench --bench parse && python3 benches/support/ratios.py parse

Reads target/criterion/*/*/new/{benchmark,estimates,sample}.json (the latest
run of each benchmark; `$CARGO_TARGET_DIR` is honoured) and prints, for every group whose name starts with the
given prefix (`parse/`, `round_trip/`, `router/`, `decode/`), rpcwire's
median time per iteration, its throughput, and the ratio of each peer's
median time to rpcwire's (above 1: rpcwire is faster), the fastest peer
first; in brackets the same ratio from each benchmark's fastest sample, which
on a shared, noisy machine is the least disturbed one. `loop_only` (a
baseline, not a peer) is shown apart; a peer whose latest result is from
another run than rpcwire's (after a filtered run) is left out, with a
warning. With --json, prints the same as JSON
(for collecting several runs).
"""
import json
import os
import sys

target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target"
)
root = os.path.join(target, "criterion")
# A group's benchmarks run one after another: a peer whose result is older
# than rpcwire's by more than this is from another run (a filtered run
# updates only what it ran) and is left out, with a warning.
SAME_RUN_SECONDS = 15 * 60
prefix = next((a for a in sys.argv[1:] if not a.startswith("--")), "")
groups = {}
for dirpath, _, files in os.walk(root):
    if os.path.basename(dirpath) != "new" or "benchmark.json" not in files:
        continue
    with open(os.path.join(dirpath, "benchmark.json")) as f:
        bench = json.load(f)
    with open(os.path.join(dirpath, "estimates.json")) as f:
        est = json.load(f)
    with open(os.path.join(dirpath, "sample.json")) as f:
        sample = json.load(f)
    fastest_sample = min(t / n for t, n in zip(sample["times"], sample["iters"]))
    if not bench["group_id"].startswith(prefix):
        continue
    tp = bench.get("throughput") or {}
    groups.setdefault(bench["group_id"], {})[bench["function_id"]] = {
        "ns": est["median"]["point_estimate"],
        "min_ns": fastest_sample,
        "bytes": tp.get("Bytes"),
        "elements": tp.get("Elements"),
        "written": os.path.getmtime(os.path.join(dirpath, "estimates.json")),
    }

out = {}
for name in sorted(groups):
    g = groups[name]
    if "rpcwire" not in g:
        continue
    ours = g["rpcwire"]["ns"]
    others = {}
    for k, v in g.items():
        if k in ("rpcwire", "loop_only"):
            continue
        if abs(v["written"] - g["rpcwire"]["written"]) > SAME_RUN_SECONDS:
            print(f"warning: {name}/{k} is from another run than rpcwire's; left out", file=sys.stderr)
            continue
        others[k] = v
    peers = {k: v["ns"] / ours for k, v in others.items()}
    by_min = {k: v["min_ns"] / g["rpcwire"]["min_ns"] for k, v in others.items()}
    fastest = max(peers, key=lambda k: 1 / peers[k]) if peers else None
    out[name] = {
        "rpcwire_ns": ours,
        "ratios": peers,
        "ratios_fastest_sample": by_min,
        "fastest_peer": fastest,
        "vs_fastest": peers[fastest] if fastest else None,
        "loop_only_ns": g.get("loop_only", {}).get("ns"),
        "bytes": g["rpcwire"]["bytes"],
    }

if "--json" in sys.argv:
    json.dump(out, sys.stdout, indent=1)
    sys.exit()
for name, r in out.items():
    tp = ""
    if r["bytes"]:
        tp = f", {r['bytes'] / r['rpcwire_ns'] * 1e9 / 2**20:8.1f} MiB/s"
    print(f"{name}: rpcwire {r['rpcwire_ns']:.1f} ns{tp}")
    for k, v in sorted(r["ratios"].items(), key=lambda kv: kv[1]):
        print(f"    {v:5.2f}x  ({r['ratios_fastest_sample'][k]:5.2f}x)  {k}")
    if r["loop_only_ns"]:
        print(f"    (loop alone: {r['loop_only_ns']:.1f} ns)")

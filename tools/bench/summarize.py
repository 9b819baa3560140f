#!/usr/bin/env python3
"""Prints chunkzero's performance targets from Google Benchmark JSON files.

Usage: summarize.py DIR   (DIR holds cast_bench.json, collectives_bench.json,
chunk_bench.json, optim_bench.json, gemm_bench.json as written by
tools/bench/run.sh). Uses
the median of the repetitions. Every figure is a ratio to a baseline measured
in the same run, except the fused Adam target, which is absolute (params/s)
and shown beside its ratio to memcpy.
"""

import json
import os
import re
import sys


def medians(path):
    """name (without _median) -> benchmark dict, for median aggregates."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        data = json.load(f)
    result = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            result[b["name"]] = {"error": b.get("error_message", "error")}
        elif b.get("aggregate_name") == "median":
            result[b["run_name"]] = b
    return result


def row(target, value, ok, detail):
    mark = "MET" if ok else "NOT MET"
    print(f"  {target:<66} {value:>8}  {mark:<7}  {detail}")


def main():
    out = sys.argv[1]
    cast = medians(os.path.join(out, "cast_bench.json"))
    coll = medians(os.path.join(out, "collectives_bench.json"))
    chunk = medians(os.path.join(out, "chunk_bench.json"))
    optim = medians(os.path.join(out, "optim_bench.json"))
    gemm = medians(os.path.join(out, "gemm_bench.json"))
    errors = [n for d in (cast, coll, chunk, optim, gemm)
              for n, b in d.items() if "error" in b]

    print("\nchunkzero performance targets (ratios to baselines from this run)")
    for name, b in sorted(cast.items()):
        m = re.match(r"BM_(CastF32ToF16|CastF16ToF32)/bytes:67108864/threads:(\d)", name)
        if not m or "error" in b:
            continue
        threads = "1 thread" if m.group(2) == "1" else "all threads"
        ratio = b["vs_memcpy"]
        row(f"{m.group(1)} 64 MiB, {threads}: >= 0.80 x memcpy", f"{ratio:.2f}",
            ratio >= 0.8, f"{b['GB/s']:.1f} vs {b['memcpy_GB/s']:.1f} GB/s")
    for name, b in sorted(coll.items()):
        if "AllReduce/ranks:2/bytes:67108864" not in name or "error" in b:
            continue
        ratio = b["busbw_over_memcpy"]
        row("in-process AllReduce, 2 ranks, 64 MiB: busbw >= 0.50 x "
            "2-thread memcpy", f"{ratio:.2f}", ratio >= 0.5,
            f"busbw {b['busbw_GBps']:.1f} vs {b['memcpy_GBps']:.1f} GB/s")
    for name, b in sorted(chunk.items()):
        m = re.match(r"BM_Chunk/(\w+)/bytes:(\d+)", name)
        if not m or "error" in b:
            continue
        mib = int(m.group(2)) >> 20
        over = b["overhead"]
        row(f"chunk {m.group(1)} {mib} MiB: <= 5% over bare collectives",
            f"{100 * over:+.1f}%", over <= 0.05,
            f"{b['chunk_us']:.0f} vs {b['bare_us']:.0f} us")
    for name, b in sorted(optim.items()):
        m = re.match(r"BM_FusedAdam/params:67108864/threads:(\d)", name)
        if not m or "error" in b:
            continue
        rate = b["params/s"] / 1e9
        detail = (f"{b['vs_memcpy']:.2f} x memcpy ({b['GB/s']:.1f} vs "
                  f"{b['memcpy_GB/s']:.1f} GB/s)")
        if m.group(1) == "2":
            row("fused mixed-precision Adam 64M params, 2 threads: "
                ">= 1.0 G params/s", f"{rate:.2f}G", rate >= 1.0, detail)
        else:  # Reported beside the target; it has none of its own.
            print(f"  {'fused mixed-precision Adam 64M params, 1 thread':<66} "
                  f"{rate:>7.2f}G  {'-':<7}  {detail}")
    for name, b in sorted(gemm.items()):
        m = re.match(r"BM_Gemm/threads:(\d)/size:1024/bf16:0", name)
        if not m or "error" in b:
            continue
        ratio = b["vs_fma_peak"]
        row(f"Gemm 1024^3, {m.group(1)} thread(s): >= 0.50 x FMA peak",
            f"{ratio:.2f}", ratio >= 0.5,
            f"{b['GFLOP/s']:.0f} GFLOP/s, {b.get('label', '')}")
    if errors:
        print("benchmarks that failed their result check or floor:",
              ", ".join(errors))
        sys.exit(1)


if __name__ == "__main__":
    main()

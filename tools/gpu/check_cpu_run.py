"""Checks what a GPU bundle's run.sh left in OUT on a machine without a GPU.

Usage: python3 check_cpu_run.py OUT

tools/test.sh's gpu-bundle config runs the bundle here, where nothing CUDA
can run; this is what that run must still have done: written the preflight
with every section, a summary.json in which every test binary exited 0 and
skipped its GPU tests, and a train.json in which the runs that need a GPU
are recorded as skipped and the CPU runs exited 0. Prints each problem and
exits 1 if there is one.
"""
import json
import os
import sys

PREFLIGHT_SECTIONS = ("=== ldd --version", "=== /proc/meminfo",
                      "=== nvidia-smi", "=== python3: torch",
                      "=== cuBLAS, cuBLASLt, NCCL and CUDA runtime",
                      "=== ldd tools_train_train")
GPU_RUNS = ("parity_gpu_1", "capped", "nvme_tiers", "bench_ours",
            "bench_torch", "parity_gpu_1_fused", "llama_gpu_1", "parity_gpu_2",
            "bench_shared")
CPU_RUNS = ("parity_cpu_1", "llama_cpu_1", "parity_cpu_2")


def problems(out):
    try:
        with open(os.path.join(out, "preflight.txt")) as f:
            preflight = f.read()
    except OSError:
        yield "no preflight.txt"
        preflight = ""
    for section in PREFLIGHT_SECTIONS:
        if preflight and section not in preflight:
            yield f"preflight.txt has no section '{section}'"
    try:
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        yield f"summary.json: {e}"
        return
    if not summary.get("binaries"):
        yield "summary.json lists no test binary"
    for row in summary.get("binaries", []):
        if row["exit"] != 0 or row["failed"]:
            yield f"{row['name']}: exit {row['exit']}, failures {row['failures']}"
        if row["skipped"] < 1:
            yield f"{row['name']}: no test skipped without a GPU"
        if not os.path.exists(os.path.join(out, "gtest", row["name"] + ".json")):
            yield f"{row['name']}: no gtest/{row['name']}.json"
    train = summary.get("train")
    if train is None:
        yield "summary.json carries no train.json"
        return
    for name in GPU_RUNS:
        if name not in train.get("skipped", []):
            yield f"train run {name} is not recorded as skipped"
    for name in CPU_RUNS:
        if train.get("exit", {}).get(name) != 0:
            yield f"train run {name}: exit {train.get('exit', {}).get(name)}"
    if train.get("failed_runs") or train.get("missed_correctness_lines"):
        yield (f"train: failed {train.get('failed_runs')}, missed "
               f"{train.get('missed_correctness_lines')}")


def main():
    found = list(problems(sys.argv[1]))
    for p in found:
        print("check_cpu_run.py:", p, file=sys.stderr)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

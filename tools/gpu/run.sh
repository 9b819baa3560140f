#!/usr/bin/env bash
# Runs a GPU bundle made by tools/gpu/bundle.sh, on the GPU machine.
#
#   OUT=/results bash gpu_bundle/run.sh      # default OUT: gpu_bundle/out
#
# Every GPU test binary runs (2 minutes each at most), then the train job's
# checks (train_checks.sh: CPU/GPU parity, a capped run, GPT-2 124M against
# PyTorch; at most 5 minutes, leaving 100 s), then each GPU benchmark (2.5
# minutes at most), all within a 9-minute budget (CHUNKZERO_GPU_RUN_SECONDS),
# so the run ends inside the GPU machine's 10-minute command limit. Into
# $OUT, six files:
#   summary.json    per test binary: exit code, tests passed, failed and
#                   skipped (from GoogleTest's JSON); totals; the GPU; the
#                   benchmark rows' counters.
#   tests.log       every binary's output, in order.
#   bench.json      every benchmark's Google Benchmark JSON, by binary.
#   nvidia-smi.txt  the GPU and driver as nvidia-smi reports them.
#   train.json      the train checks' figures and exit codes, and
#   train.log       their output (train_checks.sh).
# Exits 0 iff every test binary exited 0 and the summary was written.
#
# NCCL and cuBLAS are not in the bundle: they are looked for in NVIDIA's
# Python wheels (python3 -c 'import nvidia'), then /usr/local/cuda.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

lib_path="$here/lib"
wheel_libs="$(python3 - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit
dirs = set()
for root in nvidia.__path__:
    for f in glob.glob(os.path.join(root, "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(f))
print(":".join(sorted(dirs)))
PY
)"
[[ -n "$wheel_libs" ]] && lib_path="$lib_path:$wheel_libs"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [[ -d "$d" ]] && lib_path="$lib_path:$d"
done
export LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$out/nvidia-smi.txt"
: >"$out/tests.log"
status=0
# The whole run must end within 9 minutes (the GPU machine takes commands
# of 10): each binary gets at most its cap and what is left of the budget;
# one that finds too little left is not started, and counts as failed.
budget_end=$((SECONDS + ${CHUNKZERO_GPU_RUN_SECONDS:-540}))
time_for() {
  local left=$((budget_end - SECONDS))
  ((left < $1)) && echo "$left" || echo "$1"
}
while read -r name; do
  [[ -z "$name" ]] && continue
  echo "=== $name" >>"$out/tests.log"
  limit=$(time_for 120)
  if ((limit < 5)); then
    echo "=== $name not run: the time budget is spent" >>"$out/tests.log"
    echo "$name 124" >>"$work/exit_codes.txt"
    status=1
    continue
  fi
  timeout "$limit" "$here/bin/$name" --gtest_output="json:$work/$name.json" \
    >>"$out/tests.log" 2>&1
  rc=$?
  echo "$name $rc" >>"$work/exit_codes.txt"
  echo "=== $name exit $rc" >>"$out/tests.log"
  ((rc != 0)) && status=1
done <"$here/tests.txt"

# The train job: its checks get what is left but 100 s, 300 s at most.
train_seconds=$((budget_end - SECONDS - 100))
((train_seconds > 300)) && train_seconds=300
if ((train_seconds >= 30)); then
  bash "$here/train_checks.sh" "$here" "$out" "$train_seconds" \
    >>"$out/tests.log" 2>&1
else
  echo "=== train checks not run: the time budget is spent" >>"$out/tests.log"
fi

# Each benchmark's JSON lands in $work; summary.json carries their rows and
# bench.json all of them.
while read -r name; do
  [[ -z "$name" ]] && continue
  echo "=== $name" >>"$out/tests.log"
  limit=$(time_for 150)
  if ((limit < 5)); then
    echo "=== $name not run: the time budget is spent" >>"$out/tests.log"
    continue
  fi
  timeout "$limit" "$here/bin/$name" --benchmark_min_time=0.3 \
    --benchmark_out="$work/bench_$name.json" --benchmark_out_format=json \
    >>"$out/tests.log" 2>&1
  echo "=== $name exit $?" >>"$out/tests.log"
done <"$here/benchmarks.txt"

python3 - "$work" "$out" "$here" <<'PY'
import json, os, sys
work, out, here = sys.argv[1:4]
summary = {"commit": open(os.path.join(here, "commit.txt")).read().strip()
           if os.path.exists(os.path.join(here, "commit.txt")) else None,
           "binaries": [], "totals": {"passed": 0, "failed": 0, "skipped": 0}}
codes = {}
if os.path.exists(os.path.join(work, "exit_codes.txt")):
    for line in open(os.path.join(work, "exit_codes.txt")):
        name, rc = line.split()
        codes[name] = int(rc)
for name, rc in codes.items():
    row = {"name": name, "exit": rc, "passed": 0, "failed": 0, "skipped": 0,
           "failures": []}
    path = os.path.join(work, name + ".json")
    try:
        suites = json.load(open(path)).get("testsuites", [])
    except (OSError, ValueError):
        suites = None
    if suites is not None:
        for suite in suites:
            for test in suite.get("testsuite", []):
                full = suite["name"] + "." + test["name"]
                if test.get("result") == "SKIPPED":
                    row["skipped"] += 1
                elif test.get("failures"):
                    row["failed"] += 1
                    row["failures"].append(full)
                else:
                    row["passed"] += 1
    elif rc != 0:
        row["failed"] += 1
        row["failures"].append("(no GoogleTest JSON: crashed or timed out)")
    for key in ("passed", "failed", "skipped"):
        summary["totals"][key] += row[key]
    summary["binaries"].append(row)
summary["benchmarks"] = []
everything = {}
for name in sorted(os.listdir(work)):
    if not (name.startswith("bench_") and name.endswith(".json")):
        continue
    try:
        data = json.load(open(os.path.join(work, name)))
    except ValueError:  # Cut short by its timeout.
        summary["benchmarks"].append(
            {"name": name, "error_message": "unreadable JSON (timed out?)"})
        continue
    everything[name[len("bench_"):-len(".json")]] = data
    for b in data.get("benchmarks", []):
        row = {k: b[k] for k in ("name", "label", "real_time", "time_unit")
               if k in b}
        for k in ("GB/s", "copy_GB/s", "vs_copy", "overhead", "error_message"):
            if k in b:
                row[k] = b[k]
        summary["benchmarks"].append(row)
try:
    summary["train"] = json.load(open(os.path.join(out, "train.json")))
except (OSError, ValueError):
    summary["train"] = None
json.dump(everything, open(os.path.join(out, "bench.json"), "w"), indent=1)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
t = summary["totals"]
print(f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped")
PY
((status == 0)) && [[ -f "$out/summary.json" ]]

#!/usr/bin/env bash
# Runs a GPU bundle made by tools/gpu/bundle.sh, on the GPU machine.
#
#   OUT=/results bash gpu_bundle/run.sh      # default OUT: gpu_bundle/out
#
# Every GPU test binary runs (2 minutes each at most), then each GPU
# benchmark (2.5 minutes at most); the whole run stays under 10 minutes. Into $OUT, four files:
#   summary.json    per test binary: exit code, tests passed, failed and
#                   skipped (from GoogleTest's JSON); totals; the GPU; the
#                   benchmark rows' counters.
#   tests.log       every binary's output, in order.
#   bench.json      every benchmark's Google Benchmark JSON, by binary.
#   nvidia-smi.txt  the GPU and driver as nvidia-smi reports them.
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
while read -r name; do
  [[ -z "$name" ]] && continue
  echo "=== $name" >>"$out/tests.log"
  timeout 120 "$here/bin/$name" --gtest_output="json:$work/$name.json" \
    >>"$out/tests.log" 2>&1
  rc=$?
  echo "$name $rc" >>"$work/exit_codes.txt"
  echo "=== $name exit $rc" >>"$out/tests.log"
  ((rc != 0)) && status=1
done <"$here/tests.txt"

# Each benchmark's JSON lands in $work; summary.json carries their rows and
# bench.json all of them.
while read -r name; do
  [[ -z "$name" ]] && continue
  echo "=== $name" >>"$out/tests.log"
  timeout 150 "$here/bin/$name" --benchmark_min_time=0.3 \
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
    if os.path.exists(path):
        for suite in json.load(open(path)).get("testsuites", []):
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
    data = json.load(open(os.path.join(work, name)))
    everything[name[len("bench_"):-len(".json")]] = data
    for b in data.get("benchmarks", []):
        row = {k: b[k] for k in ("name", "label", "real_time", "time_unit")
               if k in b}
        for k in ("GB/s", "copy_GB/s", "vs_copy", "overhead", "error_message"):
            if k in b:
                row[k] = b[k]
        summary["benchmarks"].append(row)
json.dump(everything, open(os.path.join(out, "bench.json"), "w"), indent=1)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
t = summary["totals"]
print(f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped")
PY
((status == 0)) && [[ -f "$out/summary.json" ]]

#!/usr/bin/env bash
# Runs a GPU bundle made by tools/gpu/bundle.sh, on the GPU machine.
#
#   OUT=/results bash gpu_bundle/run.sh      # default OUT: gpu_bundle/out
#   CHUNKZERO_GPU_ONLY='runtime|parity' OUT=... bash gpu_bundle/run.sh
#
# The first run on a lent GPU may be the only one, so everything it learns
# lands in $OUT as soon as it is known, and a run cut short at any point
# still returns what it got:
#   preflight.txt   written before anything else runs: the C library, ldd of
#                   every binary and which cuBLAS and NCCL they resolve, the
#                   memory, nvidia-smi, whether python3's torch sees a GPU.
#   summary.json    rewritten after every binary: per test binary its exit
#                   code and tests passed, failed and skipped; totals; the
#                   benchmark rows' counters; the train checks' train.json.
#   gtest/NAME.json each test binary's GoogleTest JSON.
#   bench/NAME.json each benchmark's Google Benchmark JSON.
#   tests.log       every binary's output, in order.
#   train.json      the train checks' figures, pass lines and exit codes,
#   train.log       and their output (train_checks.sh), rewritten after
#                   every run.
#   nvidia-smi.txt  the GPU and driver as nvidia-smi reports them.
#
# Order: preflight, the CUDA runtime test, the other GPU tests (60 s each
# at most), the train checks (what is left but 60 s, 240 s at most), then
# the benchmarks (60 s each at most), all within CHUNKZERO_GPU_RUN_SECONDS
# (420 by default), so that a second, targeted call fits in the same 15
# minutes of device time. CHUNKZERO_GPU_ONLY, an extended regular
# expression, keeps the test binaries, train checks and benchmarks whose
# names it matches (the targeted call). Every process runs under
# `timeout -k 10`: one stuck in a driver call ignores SIGTERM.
#
# Exits 0 iff every test binary exited 0, the train checks passed (each
# run that was not skipped exited 0 and met its correctness line) and the
# summary was written. Without a GPU every GPU test skips and the train
# checks that need one are recorded as skipped: the run still exits 0.
#
# Libraries: each binary finds the bundle's own (lib/) through its RPATH,
# $ORIGIN/../lib, so nothing here exports a library path that python3 or
# nvidia-smi would see. NCCL and cuBLAS are not in the bundle: they are
# looked for in NVIDIA's Python wheels (python3 -c 'import nvidia'), then
# /usr/local/cuda, and given to the bundle's binaries alone.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out/gtest" "$out/bench"
budget_end=$((SECONDS + ${CHUNKZERO_GPU_RUN_SECONDS:-420}))
only="${CHUNKZERO_GPU_ONLY:-}"
wanted() { [[ -z "$only" || "$1" =~ $only ]]; }
time_for() {
  local left=$((budget_end - SECONDS))
  ((left < $1)) && echo "$left" || echo "$1"
}

nvidia_libs="$(timeout -k 5 60 python3 - <<'PY' 2>/dev/null
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
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [[ -d "$d" ]] && nvidia_libs="${nvidia_libs:+$nvidia_libs:}$d"
done
# bundled CAP COMMAND...: a bundle binary with NVIDIA's libraries, under
# the cap. NCCL_DEBUG=WARN makes an NCCL init failure explain itself.
bundled() {
  local cap="$1"
  shift
  timeout -k 10 "$cap" env \
    LD_LIBRARY_PATH="$nvidia_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    NCCL_DEBUG="${NCCL_DEBUG:-WARN}" "$@"
}
export CHUNKZERO_NVIDIA_LIBS="$nvidia_libs"

# A GPU is there when the driver's device node or nvidia-smi says so; the
# train checks skip their GPU runs otherwise.
gpu_present=0
if [[ -e /dev/nvidia0 ]] || timeout -k 5 20 nvidia-smi -L 2>/dev/null |
  grep -q '^GPU'; then
  gpu_present=1
fi

# ---- Preflight: before anything else, so that a machine on which nothing
# runs still says why.
{
  echo "=== bundle commit: $(cat "$here/commit.txt" 2>/dev/null)"
  echo "=== date: $(date -u +%FT%TZ)   gpu_present: $gpu_present"
  echo "=== uname -a"
  uname -a
  echo "=== ldd --version"
  ldd --version 2>&1 | head -1
  echo "=== the newest GLIBC symbol version the bundle needs"
  grep -aoh 'GLIBC_2\.[0-9]*' "$here"/bin/* "$here"/lib/* 2>/dev/null |
    sort -uV | tail -1
  echo "=== /proc/meminfo"
  grep -E '^(MemTotal|MemAvailable|SwapTotal):' /proc/meminfo
  echo "=== nproc: $(nproc)"
  echo "=== NVIDIA library folders given to the bundle's binaries"
  echo "${nvidia_libs:-(none found)}" | tr ':' '\n'
  echo "=== cuBLAS, cuBLASLt, NCCL and CUDA runtime as the train binary resolves them"
  LD_LIBRARY_PATH="$nvidia_libs" timeout -k 5 20 ldd \
    "$here/bin/tools_train_train" 2>&1 |
    grep -E 'libcublas|libcublasLt|libnccl|libcudart|libcuda\.so|not found' ||
    echo "(none listed)"
  echo "=== nvidia-smi"
  timeout -k 5 30 nvidia-smi 2>&1 || echo "nvidia-smi failed or is absent"
  echo "=== python3: torch"
  timeout -k 5 90 python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 |
    tail -3
  for binary in "$here"/bin/*; do
    echo "=== ldd $(basename "$binary")"
    LD_LIBRARY_PATH="$nvidia_libs" timeout -k 5 20 ldd "$binary" 2>&1
  done
} >"$out/preflight.txt" 2>&1
timeout -k 5 30 nvidia-smi >"$out/nvidia-smi.txt" 2>&1 ||
  echo "nvidia-smi failed or is absent" >>"$out/nvidia-smi.txt"

summarize() {
  python3 "$here/summarize.py" "$out" "$here" >"$out/summary.line" 2>&1 ||
    echo "summarize.py failed" >>"$out/tests.log"
}
: >"$out/tests.log"
: >"$out/exit_codes.txt"
status=0
summarize

# ---- Test binaries: the CUDA runtime's first (if it fails, nothing else
# will work, and its failure says why).
mapfile -t tests < <(grep -x 'tensor_cuda_cuda_runtime_test' "$here/tests.txt"
  grep -vx 'tensor_cuda_cuda_runtime_test' "$here/tests.txt")
for name in "${tests[@]}"; do
  [[ -z "$name" ]] && continue
  wanted "$name" || continue
  echo "=== $name" >>"$out/tests.log"
  limit=$(time_for 60)
  if ((limit < 5)); then
    echo "=== $name not run: the time budget is spent" >>"$out/tests.log"
    echo "$name 124" >>"$out/exit_codes.txt"
    status=1
    continue
  fi
  bundled "$limit" "$here/bin/$name" --gtest_output="json:$out/gtest/$name.json" \
    >>"$out/tests.log" 2>&1
  rc=$?
  echo "$name $rc" >>"$out/exit_codes.txt"
  echo "=== $name exit $rc" >>"$out/tests.log"
  ((rc != 0)) && status=1
  summarize
done

# ---- The train checks: what is left but 60 s, 240 s at most. They rewrite
# train.json after every run; summarize copies it into summary.json.
train_seconds=$((budget_end - SECONDS - 60))
((train_seconds > 240)) && train_seconds=240
if ((train_seconds >= 30)); then
  CHUNKZERO_GPU_PRESENT="$gpu_present" CHUNKZERO_GPU_ONLY="$only" \
    timeout -k 10 "$((train_seconds + 20))" \
    bash "$here/train_checks.sh" "$here" "$out" "$train_seconds" \
    >>"$out/tests.log" 2>&1
  rc=$?
  echo "=== train checks exit $rc" >>"$out/tests.log"
  ((rc != 0)) && status=1
else
  echo "=== train checks not run: the time budget is spent" >>"$out/tests.log"
  status=1
fi
summarize

# ---- Benchmarks: each one's JSON lands in bench/.
while read -r name; do
  [[ -z "$name" ]] && continue
  wanted "$name" || continue
  echo "=== $name" >>"$out/tests.log"
  limit=$(time_for 60)
  if ((limit < 5)); then
    echo "=== $name not run: the time budget is spent" >>"$out/tests.log"
    continue
  fi
  bundled "$limit" "$here/bin/$name" --benchmark_min_time=0.2 \
    --benchmark_out="$out/bench/$name.json" --benchmark_out_format=json \
    >>"$out/tests.log" 2>&1
  echo "=== $name exit $?" >>"$out/tests.log"
  summarize
done <"$here/benchmarks.txt"

summarize
cat "$out/summary.line"
((status == 0)) && [[ -s "$out/summary.json" ]]

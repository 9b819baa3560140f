#!/usr/bin/env bash
# The benchmark suite: builds with --config=opt, runs the benchmarks that
# carry chunkzero's performance targets, and prints each target beside the
# baseline measured in the same run (docs/PERFORMANCE.md explains them).
#
#   bash tools/bench/run.sh            # the README's main job (~2 minutes)
#   bash tools/bench/run.sh --full     # every size of every benchmark
#
# Raw results are kept as JSON in ${BENCH_OUT:-/tmp/chunkzero-bench}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash tools/setup.sh

out="${BENCH_OUT:-/tmp/chunkzero-bench}"
mkdir -p "${out}"
full=0
[[ "${1:-}" == --full ]] && full=1

bazel build --config=opt //tools/bench:cast_bench //tools/bench:collectives_bench \
  //tools/bench:chunk_bench //tools/bench:optim_bench //tools/bench:gemm_bench
bin="$(bazel info --config=opt bazel-bin)/tools/bench"

run() {  # name filter
  local name="$1" filter="$2"
  ((full)) && filter="."
  echo "=== ${name} (filter: ${filter})" >&2
  "${bin}/${name}" --benchmark_filter="${filter}" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true \
    --benchmark_out="${out}/${name}.json" --benchmark_out_format=json >&2
}

run cast_bench '(Copy|Cast).*/bytes:67108864/'
run collectives_bench '(AllReduce|AllGather|ReduceScatter|Broadcast)/ranks:2/bytes:67108864/'
run chunk_bench 'bytes:(4194304|67108864)/'
run optim_bench 'FusedAdam/params:67108864/'
run gemm_bench 'FmaPeak|Gemm/threads:[12]/size:1024/bf16:0'

bazel shutdown >/dev/null 2>&1 || true
python3 tools/bench/summarize.py "${out}"

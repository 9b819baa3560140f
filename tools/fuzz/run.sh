#!/usr/bin/env bash
# Runs every fuzz target (chunkzero_cc_fuzz_test, tag "fuzz") under
# libFuzzer for SECONDS seconds each, starting from its committed corpus.
# Prints "fuzz: PASS|FAIL //target" per target on stdout (tools/test.sh
# counts them). A crash, leak, timeout or out-of-memory fails the target
# and prints the reproducer; commit that input into the target's corpus directory with the
# fix, so every build replays it from then on.
#
#   bash tools/fuzz/run.sh            # 60 s per target (what CI runs)
#   bash tools/fuzz/run.sh 600        # a longer search
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seconds="${1:-60}"
bash tools/setup.sh || exit 1

targets=($(bazel query 'attr(tags, "\bfuzz\b", tests(//...))' 2>/dev/null))
if ((${#targets[@]} == 0)); then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
bazel build --config=fuzz "${targets[@]}" >&2 || exit 1
bin="$(bazel info --config=fuzz bazel-bin 2>/dev/null)"
work="$(mktemp -d -t chunkzero-fuzz.XXXXXX)"
trap 'rm -rf "${work}"' EXIT

status=0
for target in "${targets[@]}"; do
  package="${target#//}"
  package="${package%%:*}"
  name="${target##*:}"
  corpus_dir="${package}/testdata/${name%_test}_corpus"
  scratch="${work}/${name}/corpus"
  artifacts="${work}/${name}/artifacts/"
  mkdir -p "${scratch}" "${artifacts}"
  cp -r "${corpus_dir}/." "${scratch}/"
  echo "=== fuzz ${target}: ${seconds} s from $(ls "${corpus_dir}" | wc -l) seeds" >&2
  # -rss_limit_mb: the targets plan within a few MiB; more is a bug.
  if ! "${bin}/${package}/${name}" -max_total_time="${seconds}" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="${artifacts}" "${scratch}" \
      >"${work}/${name}.log" 2>&1; then
    status=1
    echo "fuzz: FAIL ${target}"
    tail -n 40 "${work}/${name}.log" >&2
    for crash in "${artifacts}"*; do
      [[ -e "${crash}" ]] || continue
      echo "fuzz: ${target} failed on this input (base64); add it to" \
           "${corpus_dir}/ with the fix:" >&2
      base64 "${crash}" >&2
    done
  else
    grep -E "^Done" "${work}/${name}.log" >&2
    echo "fuzz: PASS ${target}"
  fi
done
bazel shutdown >/dev/null 2>&1 || true
exit "${status}"

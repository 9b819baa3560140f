#!/usr/bin/env bash
# Runs every test, in each Bazel config named on the command line (default:
# the plain build), and ends with one line `N passed, N failed, N skipped`.
#
#   bash tools/test.sh                 # what the README's quick start runs
#   bash tools/test.sh format default tsan asan+ubsan gpu-bundle fuzz
#                                      # what CI runs (.ci/run)
#   bash tools/test.sh tsan            # clang: ThreadSanitizer and the
#                                      # thread-safety analysis, manual
#                                      # targets compiled too
#   bash tools/test.sh cuda            # nvcc and CUDA linked; GPU tests
#                                      # skip where no GPU is visible
#   bash tools/test.sh asan ubsan      # one build each
#   bash tools/test.sh asan+ubsan      # one build with both (what CI runs)
#   bash tools/test.sh fuzz            # libFuzzer, 60 s per target
#                                      # (CHUNKZERO_FUZZ_SECONDS)
#   bash tools/test.sh format          # .clang-format (tools/format_check.sh)
#   bash tools/test.sh thread-safety   # compile //... with clang
#                                      # -Wthread-safety only (quicker
#                                      # than tsan; nothing links)
#   bash tools/test.sh gpu-bundle      # tools/gpu/bundle.sh and its run.sh
#   bash tools/test.sh examples        # examples/, a workspace of its own
#                                      # that uses chunkzero as a library
#
# Counts are of GoogleTest test cases, read from the test.xml files Bazel
# keeps; a test target that fails to build or times out counts as one failed.
# Each config's line also gives the seconds it took: CI has 90 minutes for
# all of them.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh || exit 1

configs=("$@")
((${#configs[@]} > 0)) || configs=(default)

total_passed=0
total_failed=0
total_skipped=0
started=${SECONDS}
phase_done() { echo "=== ${config} took $((SECONDS - phase_start)) s" >&2; }
for config in "${configs[@]}"; do
  phase_start=${SECONDS}
  if [[ "${config}" == format ]]; then
    # Every C++ file against .clang-format: one case.
    echo "=== format (tools/format_check.sh)" >&2
    if bash tools/format_check.sh; then
      total_passed=$((total_passed + 1))
    else
      total_failed=$((total_failed + 1))
    fi
    phase_done
    continue
  fi
  if [[ "${config}" == thread-safety ]]; then
    # A compile, not a test run: clang's -Wthread-safety checks every lock
    # annotation at compile time (.bazelrc), benchmarks included. Only the
    # object files are asked for (output group compilation_outputs), so
    # nothing links: the other configs link everything.
    echo "=== bazel build --config=thread-safety //... (and manual targets)" >&2
    manual="$(bazel query 'attr(tags, "manual", //...)' 2>/dev/null)"
    # shellcheck disable=SC2086
    if bazel build --config=thread-safety \
      --output_groups=compilation_outputs //... ${manual} >&2; then
      total_passed=$((total_passed + 1))
    else
      total_failed=$((total_failed + 1))
    fi
    phase_done
    continue
  fi
  if [[ "${config}" == gpu-bundle ]]; then
    # The GPU bundle builds, its tarball fits the 64 MiB that travels, and
    # the run.sh unpacked from it runs here and exits 0, leaving what
    # tools/gpu/check_cpu_run.py checks (the preflight, every GPU test
    # skipped, the train checks' GPU runs skipped): one case.
    echo "=== gpu-bundle (tools/gpu/bundle.sh, then its run.sh)" >&2
    bundle="$(mktemp -d)"
    if bash tools/gpu/bundle.sh "${bundle}/gpu_bundle" >&2 &&
      mkdir "${bundle}/unpacked" &&
      tar -C "${bundle}/unpacked" -xzf "${bundle}/gpu_bundle.tar.gz" &&
      OUT="${bundle}/out" bash "${bundle}/unpacked/gpu_bundle/run.sh" >&2 &&
      python3 tools/gpu/check_cpu_run.py "${bundle}/out"; then
      total_passed=$((total_passed + 1))
    else
      total_failed=$((total_failed + 1))
    fi
    rm -rf "${bundle}"
    phase_done
    continue
  fi
  if [[ "${config}" == examples ]]; then
    # examples/ is a separate workspace depending on chunkzero through
    # local_repository and chunkzero_dependencies(): its tests prove that a
    # model of one's own trains through the engine from outside the tree.
    log="$(mktemp)"
    echo "=== examples: bazel test //... in examples/" >&2
    (cd examples && bazel test --test_summary=short //... 2>&1) | tee "${log}" >&2
    counts="$(python3 tools/count_tests.py "${log}" "$(cd examples && bazel info bazel-testlogs 2>/dev/null)")"
    rm -f "${log}"
    read -r passed failed skipped <<<"${counts}"
    # One more case: the examples reach chunkzero through //engine and
    # //comm:world alone, as a user's model should be able to.
    direct="$(cd examples && bazel query --output=label \
      'filter("^@chunkzero//", deps(//..., 1))' 2>/dev/null | sort | xargs)"
    (cd examples && bazel shutdown 2>/dev/null)
    if [[ "${direct}" == "@chunkzero//comm:world @chunkzero//engine:engine" ]]; then
      passed=$((passed + 1))
    else
      echo "examples: depend on chunkzero through '${direct}'," \
        "not @chunkzero//engine and @chunkzero//comm:world alone" >&2
      failed=$((failed + 1))
    fi
    echo "examples: ${passed} passed, ${failed} failed, ${skipped} skipped" >&2
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    total_skipped=$((total_skipped + skipped))
    phase_done
    continue
  fi
  if [[ "${config}" == fuzz ]]; then
    # Every fuzz target under libFuzzer for CHUNKZERO_FUZZ_SECONDS (60) s:
    # one passed or failed case per target.
    log="$(mktemp)"
    echo "=== fuzz (tools/fuzz/run.sh)" >&2
    bash tools/fuzz/run.sh "${CHUNKZERO_FUZZ_SECONDS:-60}" | tee "${log}" >&2
    passed="$(grep -c '^fuzz: PASS ' "${log}")"
    failed="$(grep -c '^fuzz: FAIL ' "${log}")"
    # A run that never got to its targets (a build failure) is a failure.
    ((passed + failed > 0)) || failed=1
    rm -f "${log}"
    echo "fuzz: ${passed} passed, ${failed} failed, 0 skipped" >&2
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    phase_done
    continue
  fi
  # "asan+ubsan": both sanitizers in one build (--config=asan
  # --config=ubsan), which costs one build rather than two.
  flags=()
  if [[ "${config}" != default ]]; then
    IFS=+ read -r -a parts <<<"${config}"
    for part in "${parts[@]}"; do flags+=("--config=${part}"); done
  fi
  log="$(mktemp)"
  echo "=== bazel test ${flags[*]} //..." >&2
  bazel test "${flags[@]}" --test_summary=short //... 2>&1 | tee "${log}" >&2
  counts="$(python3 tools/count_tests.py "${log}" "$(bazel info "${flags[@]}" bazel-testlogs 2>/dev/null)")"
  rm -f "${log}"
  read -r passed failed skipped <<<"${counts}"
  if [[ "${config}" == tsan ]]; then
    # The tsan build (clang) also runs the thread-safety analysis; the
    # manual targets (benchmarks, tools) are compiled under it too: one
    # case.
    echo "=== bazel build --config=tsan (manual targets, compile only)" >&2
    manual="$(bazel query 'kind("cc_(binary|library|test)", attr(tags, "manual", //...))' 2>/dev/null)"
    # shellcheck disable=SC2086
    if bazel build "${flags[@]}" --output_groups=compilation_outputs \
      ${manual} >&2; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  fi
  echo "${config}: ${passed} passed, ${failed} failed, ${skipped} skipped" >&2
  phase_done
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  total_skipped=$((total_skipped + skipped))
done

# Leave no Bazel server behind (CI runs this in a throwaway clone).
bazel shutdown >/dev/null 2>&1 || true

echo "all configs took $((SECONDS - started)) s" >&2
echo "${total_passed} passed, ${total_failed} failed, ${total_skipped} skipped"
((total_failed == 0 && total_passed > 0))

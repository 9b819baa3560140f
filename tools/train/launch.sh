#!/usr/bin/env bash
# Starts a training job as N processes on this machine, one rank each, over
# the Gloo backend (a FileStore rendezvous in a fresh temporary directory).
# Rank 0 prints the progress and the summary; the other ranks' output goes
# to rank<r>.log in the rendezvous directory, shown if the job fails.
#
#   bash tools/train/launch.sh 4 --steps=20 --metrics_out=/tmp/m.jsonl
#
# The binary is $CHUNKZERO_TRAIN_BIN if set, else //tools:train built with
# --config=opt. The first failing rank's exit status is the job's.
set -euo pipefail
if (($# < 1)) || ! [[ "$1" =~ ^[0-9]+$ ]] || (($1 < 1)); then
  echo "usage: $0 NUM_PROCESSES [train flags...]" >&2
  exit 2
fi
n="$1"
shift
bin="${CHUNKZERO_TRAIN_BIN:-}"
if [[ -z "${bin}" ]]; then
  cd "$(dirname "${BASH_SOURCE[0]}")/../.."
  bash tools/setup.sh
  bazel build --config=opt //tools:train >&2
  bin="$(bazel info --config=opt bazel-bin)/tools/train/train"
fi
dir="$(mktemp -d -t chunkzero-rendezvous.XXXXXX)"
trap 'rm -rf "${dir}"' EXIT
pids=()
for ((r = 0; r < n; ++r)); do
  args=(--world_size="${n}" --backend=gloo --rank="${r}"
        --rendezvous="${dir}/store" "$@")
  if ((r == 0)); then
    "${bin}" "${args[@]}" &
  else
    "${bin}" "${args[@]}" >"${dir}/rank${r}.log" 2>&1 &
  fi
  pids+=($!)
done
status=0
for ((r = 0; r < n; ++r)); do
  code=0
  wait "${pids[r]}" || code=$?
  if ((code != 0 && status == 0)); then
    status=${code}
    if ((r > 0)); then
      echo "rank ${r} failed (exit ${code}):" >&2
      cat "${dir}/rank${r}.log" >&2
    fi
  fi
done
exit "${status}"

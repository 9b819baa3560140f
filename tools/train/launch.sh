#!/usr/bin/env bash
# Starts a training job as N processes on this machine, one rank each, over
# the Gloo backend, through the launcher (//tools/launch:launch; see
# tools/launch/launcher.h). Rank 0 prints the progress and the summary; the
# other ranks' output is shown only if one of them fails. When a rank fails,
# or this script gets SIGINT/SIGTERM/SIGHUP, every rank is stopped, and the
# first failing rank's exit status is the job's.
#
#   bash tools/train/launch.sh 4 --steps=20 --metrics_out=/tmp/m.jsonl
#
# Across hosts, one launcher per host, the launcher's flags before N
# (tools/launch/launcher.h; docs/MULTIHOST.md):
#
#   bash tools/train/launch.sh --nnodes=3 --node_rank=0 \
#       --master_addr=10.0.0.1 2 --steps=20
#
# The launcher sets each rank's --world_size, --rank and --rendezvous, and
# refuses them among the train flags (exit 2, naming the flag).
#
# The train binary is $CHUNKZERO_TRAIN_BIN and the launcher
# $CHUNKZERO_LAUNCH_BIN if set; what is not set is built with --config=opt.
set -euo pipefail
launcher_flags=()
while (($# > 0)) && [[ "$1" == --* ]]; do
  launcher_flags+=("$1")
  shift
done
if (($# < 1)) || ! [[ "$1" =~ ^[0-9]+$ ]] || (($1 < 1)); then
  echo "usage: $0 [launcher flags...] NUM_PROCESSES [train flags...]" >&2
  exit 2
fi
n="$1"
shift
train="${CHUNKZERO_TRAIN_BIN:-}"
launch="${CHUNKZERO_LAUNCH_BIN:-}"
if [[ -z "${train}" || -z "${launch}" ]]; then
  targets=()
  [[ -n "${train}" ]] || targets+=(//tools:train)
  [[ -n "${launch}" ]] || targets+=(//tools/launch:launch)
  # In a subshell, so that the job runs in the caller's directory and
  # relative paths in the train flags mean what the caller meant.
  bin="$(
    set -e
    cd "$(dirname "${BASH_SOURCE[0]}")/../.."
    bash tools/setup.sh >&2
    bazel build --config=opt "${targets[@]}" >&2
    bazel info --config=opt bazel-bin
  )"
  train="${train:-${bin}/tools/train/train}"
  launch="${launch:-${bin}/tools/launch/launch}"
fi
exec "${launch}" "${launcher_flags[@]}" "${n}" "${train}" "$@"

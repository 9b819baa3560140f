#!/usr/bin/env bash
# The main job: installs what the build needs (tools/setup.sh), builds the
# train binary with -O3 and runs it. With no arguments it trains a small
# GPT-2 on built-in text with 4 in-process ranks and prints the summary;
# arguments are passed on as flags (README.md lists them).
#
#   bash tools/train.sh
#   bash tools/train.sh --steps=200 --storage=replicated --metrics_out=/tmp/m.jsonl
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
bazel build --config=opt //tools:train
exec "$(bazel info --config=opt bazel-bin)/tools/train/train" "$@"

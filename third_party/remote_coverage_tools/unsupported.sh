#!/bin/sh
echo "bazel coverage is not supported offline in chunkzero" >&2
exit 1

#!/usr/bin/env python3
"""TensorBoard's own reader against the train job's --tensorboard_dir.

Runs the train job with --tensorboard_dir and --metrics_out, loads the
event file with TensorBoard's EventAccumulator, and checks that every
scalar of every step is the metrics JSON's figure rounded to f32:

  10 tags, 5 steps, 50 scalars: every one equal

PyPI's tensorboard is not a chunkzero dependency: run this from a
throw-away virtual environment, after building the train job, e.g.
  python3 -m venv /tmp/tbenv && /tmp/tbenv/bin/pip install tensorboard
  bazel build -c opt //tools:train
  /tmp/tbenv/bin/python tools/bench/peers/tensorboard_readback.py
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def expected(row):
    ranks = row["ranks"]
    return {
        "train/loss": row["loss"],
        "train/lr": row["lr"],
        "train/grad_norm": row["grad_norm"],
        "train/loss_scale": row["loss_scale"],
        "train/tokens_per_s": row["tokens_per_s"],
        "train/step_time_s": row["step_time_s"],
        "memory/device_peak_bytes": max(r["device_peak_bytes"] for r in ranks),
        "memory/host_peak_bytes": max(r["host_peak_bytes"] for r in ranks),
        "copies/h2d_bytes": sum(r["h2d_bytes"] for r in ranks),
        "copies/d2h_bytes": sum(r["d2h_bytes"] for r in ranks),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", default="bazel-bin/tools/train/train")
    p.add_argument("--model", default="llama")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="tb_")
    logdir = os.path.join(work, "runs")
    metrics = os.path.join(work, "metrics.jsonl")
    subprocess.run(
        [args.train, f"--model={args.model}", "--world_size=2", "--steps=5",
         "--offload=params", "--device_memory_limit=1G",
         f"--tensorboard_dir={logdir}", f"--metrics_out={metrics}"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    acc = event_accumulator.EventAccumulator(logdir)
    acc.Reload()
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    tags = acc.Tags()["scalars"]
    checked = mismatches = 0
    for i, row in enumerate(rows):
        for tag, want in expected(row).items():
            event = acc.Scalars(tag)[i]
            checked += 1
            if event.step != row["step"] or event.value != f32(want):
                mismatches += 1
                print(f"step {row['step']} {tag}: {event.value} != {want}")
    print(f"{len(tags)} tags, {len(rows)} steps, {checked} scalars: "
          + ("every one equal" if not mismatches else f"{mismatches} differ"))
    sys.exit(1 if mismatches or len(tags) != 10 else 0)


if __name__ == "__main__":
    main()

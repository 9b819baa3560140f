#!/usr/bin/env bash
# The train job on the GPU, as run.sh runs it from a GPU bundle:
#
#   bash train_checks.sh BUNDLE_DIR OUT_DIR SECONDS
#
# Within SECONDS, each run under its own timeout:
#   parity    the same small f32 job on the CPU and on cuda:0 (1 rank, with
#             the batched and the fused attention, and 2 ranks sharing the
#             GPU through the in-process group staged via pinned memory):
#             the loss trajectories side by side.
#   capped    the README's larger-than-memory model (12 x 256, 10 M
#             parameters, replicated DDP ~162 MiB per rank) on 2 ranks
#             sharing cuda:0 under a 32 MiB cap with --offload=params: the
#             device peak against the cap.
#   bench     GPT-2 124M (12 x 768, context 1024, vocab 50257) in bf16 at
#             world size 1 (NCCL), beside PyTorch running the same model eagerly
#             (torch_gpt2_bench.py) and the GPU's bf16 GEMM rate: step
#             times, tokens/s and model FLOPs utilisation.
#   shared    the same 124M step as 2 ranks sharing cuda:0 (in-process,
#             staged through pinned memory), 4 sequences each: its step
#             time over world size 1's (the same samples per step).
# Writes OUT_DIR/train.json (every figure and each run's exit code) and
# OUT_DIR/train.log (every run's output). The environment (LD_LIBRARY_PATH)
# is run.sh's.
set -uo pipefail
here="$1"
out="$2"
budget_end=$((SECONDS + $3))
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
train="$here/bin/tools_train_train"
log="$out/train.log"
: >"$log"

# run NAME CAP_SECONDS COMMAND...: runs it under the cap or what is left of
# the budget, appending its output to the log and its exit code to codes.
run() {
  local name="$1" cap="$2"
  shift 2
  local left=$((budget_end - SECONDS))
  ((left < cap)) && cap=$left
  echo "=== $name: $*" >>"$log"
  if ((cap < 10)); then
    echo "=== $name not run: the time budget is spent" >>"$log"
    echo "$name 124" >>"$work/codes.txt"
    return
  fi
  timeout "$cap" "$@" >"$work/$name.out" 2>&1
  local rc=$?
  cat "$work/$name.out" >>"$log"
  echo "=== $name exit $rc" >>"$log"
  echo "$name $rc" >>"$work/codes.txt"
}

small=(--layers=2 --d_model=128 --heads=4 --seq_len=64 --vocab=256 --batch=4
  --steps=5 --precision=fp32)
big=(--layers=12 --d_model=768 --heads=12 --seq_len=1024 --vocab=50257
  --precision=bf16 --device=cuda)
# Most wanted first: what the budget cuts short is recorded as exit 124.
run parity_cpu_1 30 "$train" "${small[@]}" --world_size=1 --device=cpu \
  --metrics_out="$work/parity_cpu_1.jsonl"
run parity_gpu_1 30 "$train" "${small[@]}" --world_size=1 --device=cuda \
  --metrics_out="$work/parity_gpu_1.jsonl"
# World size 1 on NCCL: the chunks' collectives are device copies, where
# the in-process group would stage them through the host.
run bench_ours 100 "$train" "${big[@]}" --batch=8 --steps=8 --world_size=1 \
  --backend=nccl --metrics_out="$work/bench_ours.jsonl"
run bench_torch 90 python3 "$here/torch_gpt2_bench.py" 12 768 12 1024 50257 \
  8 8
run capped 45 "$train" --layers=12 --d_model=256 --heads=8 --seq_len=64 \
  --vocab=2048 --batch=1 --world_size=2 --steps=4 --device=cuda \
  --device_memory_limit=32MiB --offload=params \
  --metrics_out="$work/capped.jsonl"
run parity_gpu_1_fused 30 "$train" "${small[@]}" --world_size=1 \
  --device=cuda --fused_attention \
  --metrics_out="$work/parity_gpu_1_fused.jsonl"
run parity_cpu_2 30 "$train" "${small[@]}" --world_size=2 --device=cpu \
  --metrics_out="$work/parity_cpu_2.jsonl"
run parity_gpu_2 30 "$train" "${small[@]}" --world_size=2 --device=cuda \
  --metrics_out="$work/parity_gpu_2.jsonl"
run bench_shared 100 "$train" "${big[@]}" --batch=4 --steps=6 --world_size=2 \
  --metrics_out="$work/bench_shared.jsonl"

python3 - "$work" "$out" <<'PY'
import json, os, sys
work, out = sys.argv[1:3]
result = {"exit": {}}
for line in open(os.path.join(work, "codes.txt")):
    name, rc = line.split()
    result["exit"][name] = int(rc)

def metrics(name):
    path = os.path.join(work, name + ".jsonl")
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return []

parity = {}
for ranks in (1, 2):
    cpu = [m["loss"] for m in metrics(f"parity_cpu_{ranks}")]
    gpu = [m["loss"] for m in metrics(f"parity_gpu_{ranks}")]
    row = {"cpu_losses": cpu, "gpu_losses": gpu}
    if cpu and len(cpu) == len(gpu):
        row["max_relative_difference"] = max(
            abs(g - c) / abs(c) for c, g in zip(cpu, gpu))
    parity[f"world_{ranks}"] = row
fused = [m["loss"] for m in metrics("parity_gpu_1_fused")]
cpu = parity["world_1"]["cpu_losses"]
row = {"gpu_losses": fused}
if cpu and len(cpu) == len(fused):
    row["max_relative_difference"] = max(
        abs(g - c) / abs(c) for c, g in zip(cpu, fused))
parity["world_1_fused_attention"] = row
result["parity_f32"] = parity

capped = metrics("capped")
if capped:
    peak = max(r["device_peak_bytes"] for m in capped for r in m["ranks"])
    result["capped"] = {"cap_bytes": 32 << 20, "device_peak_bytes": peak,
                        "within_cap": peak <= 32 << 20,
                        "losses": [m["loss"] for m in capped]}

# 124M: 6 psi + 12 L T C model FLOPs per token (GptModelFlopsPerStep).
L, C, T, V, B = 12, 768, 1024, 50257, 8
psi = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
flops_per_step = (6 * psi + 12 * L * T * C) * B * T
ours = metrics("bench_ours")
bench = {"model_flops_per_step": flops_per_step}
if len(ours) >= 3:
    steady = sorted(m["step_time_s"] for m in ours[2:])
    bench["ours_step_ms"] = steady[len(steady) // 2] * 1e3
    bench["ours_losses"] = [m["loss"] for m in ours]
try:
    torch = json.loads(open(os.path.join(work, "bench_torch.out"))
                       .read().strip().splitlines()[-1])
    bench["torch"] = torch
except (OSError, ValueError, IndexError):
    torch = None
shared = metrics("bench_shared")
if len(shared) >= 3 and "ours_step_ms" in bench:
    steady = sorted(m["step_time_s"] for m in shared[2:])
    bench["shared_2_ranks_step_ms"] = steady[len(steady) // 2] * 1e3
    bench["shared_vs_world_1_per_sample"] = (
        bench["shared_2_ranks_step_ms"] / bench["ours_step_ms"])
if "ours_step_ms" in bench and torch:
    rate = torch["gemm_tflops"] * 1e12
    bench["ours_mfu"] = flops_per_step / (bench["ours_step_ms"] / 1e3) / rate
    bench["torch_mfu"] = flops_per_step / (torch["step_ms"] / 1e3) / rate
    bench["ours_vs_torch"] = bench["ours_step_ms"] / torch["step_ms"]
result["bench_124m_bf16"] = bench
json.dump(result, open(os.path.join(out, "train.json"), "w"), indent=1)
print(json.dumps({k: result[k] for k in ("exit",)}))
PY

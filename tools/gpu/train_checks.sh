#!/usr/bin/env bash
# The train job on the GPU, as run.sh runs it from a GPU bundle:
#
#   bash train_checks.sh BUNDLE_DIR OUT_DIR SECONDS
#
# Within SECONDS, each run under its own timeout:
#   parity    the same small f32 job on the CPU and on cuda:0 (1 rank, with
#             the batched and the fused attention, and 2 ranks sharing the
#             GPU through the in-process group staged via pinned memory),
#             and a small Llama (grouped-query heads) on both: the loss
#             trajectories side by side.
#   capped    the README's larger-than-memory model (12 x 256, 10 M
#             parameters, replicated DDP ~162 MiB per rank) on 2 ranks
#             sharing cuda:0 under a 32 MiB cap with --offload=params: the
#             device peak against the cap.
#   nvme_tiers  the capped job with --offload=nvme and a 20 MiB host
#             limit: parameter chunks on the GPU, in host memory and on disk
#             (scratch under the bundle), each memory against its limit
#             and the losses against capped's, which must be equal.
#   bench     GPT-2 124M (12 x 768, context 1024, vocab 50257) in bf16 at
#             world size 1 (NCCL), beside PyTorch running the same model eagerly
#             (torch_gpt2_bench.py) and the GPU's bf16 GEMM rate: step
#             times, tokens/s and model FLOPs utilisation.
#   shared    the same 124M step as 2 ranks sharing cuda:0 (in-process,
#             staged through pinned memory), 4 sequences each: its step
#             time over world size 1's (the same samples per step).
# After every run, rewrites OUT_DIR/train.json (train_summary.py: every
# figure, its pass line and whether it is met, each run's exit code) and
# appends to OUT_DIR/train.log (every run's output); the runs' metrics stay
# in OUT_DIR/train/. CHUNKZERO_GPU_PRESENT=0 (run.sh's finding) records the
# runs that need a GPU as skipped; CHUNKZERO_GPU_ONLY keeps the runs whose
# names it matches. Exits 0 iff every run that was not skipped exited 0 and
# met its correctness line.
set -uo pipefail
here="$1"
out="$2"
budget_end=$((SECONDS + $3))
gpu_present="${CHUNKZERO_GPU_PRESENT:-1}"
only="${CHUNKZERO_GPU_ONLY:-}"
work="$out/train"
mkdir -p "$work"
: >"$work/codes.txt"
train="$here/bin/tools_train_train"
log="$out/train.log"
: >"$log"

summarize() {
  python3 "$here/train_summary.py" "$work" "$out" >>"$log" 2>&1 ||
    echo "=== train_summary.py failed" >>"$log"
}

# run NAME WHERE CAP_SECONDS COMMAND...: runs it under the cap or what is
# left of the budget (timeout -k 10: a process stuck in a driver call
# ignores SIGTERM), appending its output to the log and its exit code to
# codes.txt, then rewrites train.json. WHERE is gpu or cpu: a gpu run is
# recorded as skipped where there is no GPU. Bundle binaries get NVIDIA's
# libraries (run.sh's CHUNKZERO_NVIDIA_LIBS) and NCCL_DEBUG=WARN; python3
# gets neither.
run() {
  local name="$1" where="$2" cap="$3"
  shift 3
  if [[ -n "$only" && ! "$name" =~ $only ]]; then return; fi
  if [[ "$where" == gpu && "$gpu_present" != 1 ]]; then
    echo "=== $name skipped: no GPU" >>"$log"
    echo "$name skipped" >>"$work/codes.txt"
    summarize
    return
  fi
  local left=$((budget_end - SECONDS))
  ((left < cap)) && cap=$left
  echo "=== $name: $*" >>"$log"
  if ((cap < 10)); then
    echo "=== $name not run: the time budget is spent" >>"$log"
    echo "$name 124" >>"$work/codes.txt"
    summarize
    return
  fi
  if [[ "$1" == "$train" ]]; then
    timeout -k 10 "$cap" env \
      LD_LIBRARY_PATH="${CHUNKZERO_NVIDIA_LIBS:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      NCCL_DEBUG="${NCCL_DEBUG:-WARN}" "$@" >"$work/$name.out" 2>&1
  else
    timeout -k 10 "$cap" "$@" >"$work/$name.out" 2>&1
  fi
  local rc=$?
  cat "$work/$name.out" >>"$log"
  echo "=== $name exit $rc" >>"$log"
  echo "$name $rc" >>"$work/codes.txt"
  summarize
}

small=(--layers=2 --d_model=128 --heads=4 --seq_len=64 --vocab=256 --batch=4
  --steps=5 --precision=fp32)
llama=(--model=llama --layers=2 --d_model=128 --heads=4 --kv_heads=2
  --ffn=256 --rope_theta=500000 --seq_len=64 --vocab=256 --batch=4 --steps=5
  --precision=fp32)
big=(--layers=12 --d_model=768 --heads=12 --seq_len=1024 --vocab=50257
  --precision=bf16 --device=cuda)
# Most wanted first, correctness before speed: what the budget cuts short
# is recorded as exit 124, and train.json keeps every figure a finished run
# gave, whether or not it meets its line.
run parity_cpu_1 cpu 20 "$train" "${small[@]}" --world_size=1 --device=cpu \
  --metrics_out="$work/parity_cpu_1.jsonl"
run parity_gpu_1 gpu 30 "$train" "${small[@]}" --world_size=1 --device=cuda \
  --metrics_out="$work/parity_gpu_1.jsonl"
run capped gpu 40 "$train" --layers=12 --d_model=256 --heads=8 --seq_len=64 \
  --vocab=2048 --batch=1 --world_size=2 --steps=4 --device=cuda \
  --device_memory_limit=32MiB --offload=params \
  --metrics_out="$work/capped.jsonl"
mkdir -p "$here/nvme_scratch"
run nvme_tiers gpu 40 "$train" --layers=12 --d_model=256 --heads=8 \
  --seq_len=64 --vocab=2048 --batch=1 --world_size=2 --steps=4 --device=cuda \
  --device_memory_limit=32MiB --offload=nvme --nvme_path="$here/nvme_scratch" \
  --host_memory_limit=20MiB --metrics_out="$work/nvme_tiers.jsonl"
# World size 1 on NCCL: the chunks' collectives are device copies, where
# the in-process group would stage them through the host.
run bench_ours gpu 90 "$train" "${big[@]}" --batch=8 --steps=8 --world_size=1 \
  --backend=nccl --metrics_out="$work/bench_ours.jsonl"
run bench_torch gpu 80 python3 "$here/torch_gpt2_bench.py" 12 768 12 1024 \
  50257 8 8
run parity_gpu_1_fused gpu 30 "$train" "${small[@]}" --world_size=1 \
  --device=cuda --fused_attention \
  --metrics_out="$work/parity_gpu_1_fused.jsonl"
# The Llama through the same engine: grouped-query heads, rope_theta
# 500000, on the CPU and on cuda:0.
run llama_cpu_1 cpu 20 "$train" "${llama[@]}" --world_size=1 --device=cpu \
  --metrics_out="$work/llama_cpu_1.jsonl"
run llama_gpu_1 gpu 30 "$train" "${llama[@]}" --world_size=1 --device=cuda \
  --metrics_out="$work/llama_gpu_1.jsonl"
run parity_cpu_2 cpu 20 "$train" "${small[@]}" --world_size=2 --device=cpu \
  --metrics_out="$work/parity_cpu_2.jsonl"
run parity_gpu_2 gpu 30 "$train" "${small[@]}" --world_size=2 --device=cuda \
  --metrics_out="$work/parity_gpu_2.jsonl"
run bench_shared gpu 90 "$train" "${big[@]}" --batch=4 --steps=6 \
  --world_size=2 --metrics_out="$work/bench_shared.jsonl"

# The exit code: 0 iff every run that was not skipped exited 0 and met its
# correctness line (speed lines are recorded, not enforced).
python3 "$here/train_summary.py" "$work" "$out" --verdict >>"$log" 2>&1

#!/usr/bin/env python3
"""PyTorch peers of chunkzero's train job: Llama with DDP and with FSDP2.

The shape docs/PERFORMANCE.md compares on: transformers' LlamaForCausalLM
(SDPA attention), 6 layers x 512, 8 heads and 4 key/value heads, MLP
1408, context 256, vocab 8192, untied, 2 ranks x batch 2, AdamW, trained
with torch DDP and with FSDP2 (`fully_shard` per decoder layer) over gloo,
in f32 and in bf16 autocast (matrix products in bf16, the rest in f32, as
`torch.autocast("cpu", dtype=torch.bfloat16)` does). One process per rank,
each with cores / ranks threads, as chunkzero's ranks get. Prints one line
per run:

  torch ddp f32: 0.812 s per step, 1261 tokens/s, 179.2 model GFLOP/s

Model FLOPs count as chunkzero's summary counts them (6 Psi + 12 L T
heads head_dim per token).

PyTorch and transformers are not chunkzero dependencies: run this from a
throw-away virtual environment, e.g.
  python3 -m venv /tmp/torchenv
  /tmp/torchenv/bin/pip install torch transformers
  /tmp/torchenv/bin/python tools/bench/peers/torch_llama.py
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import transformers


def make_model(args):
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.d_model,
        intermediate_size=args.ffn, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.seq_len, tie_word_embeddings=False,
        attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(config).float()


def run_rank(rank, args, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    torch.manual_seed(0)
    model = make_model(args)
    psi = sum(p.numel() for p in model.parameters())
    flops = 6.0 * psi + 12.0 * args.layers * args.seq_len * args.d_model
    if args.wrapper == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    generator = torch.Generator().manual_seed(1 + rank)
    shape = (args.batch, args.seq_len)
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, args.vocab, shape, generator=generator)
        targets = torch.randint(0, args.vocab, shape, generator=generator)
        dist.barrier()
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16,
                            enabled=args.precision == "bf16"):
            logits = model(input_ids=tokens).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                   targets.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dist.barrier()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    if rank == 0:
        step_s = sorted(times)[len(times) // 2]  # The median step.
        tokens_per_step = args.world_size * args.batch * args.seq_len
        results.put((step_s, tokens_per_step / step_s,
                     flops * tokens_per_step / step_s / 1e9))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d_model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv_heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1408)
    parser.add_argument("--seq_len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=2, help="per rank")
    parser.add_argument("--world_size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int,
                        default=max(1, (os.cpu_count() or 1) // 2),
                        help="per rank (default: cores / 2)")
    parser.add_argument("--wrappers", default="ddp,fsdp2")
    parser.add_argument("--precisions", default="f32,bf16")
    args = parser.parse_args()
    context = mp.get_context("spawn")
    port = 29500 + os.getpid() % 1000
    for wrapper in args.wrappers.split(","):
        for precision in args.precisions.split(","):
            args.wrapper, args.precision = wrapper, precision
            results = context.SimpleQueue()
            mp.start_processes(run_rank, args=(args, port, results),
                               nprocs=args.world_size, start_method="spawn")
            port += 1
            step_s, tokens_s, gflops = results.get()
            print(f"torch {wrapper} {precision}: {step_s:.3f} s per step, "
                  f"{tokens_s:.0f} tokens/s, {gflops:.1f} model GFLOP/s",
                  flush=True)


if __name__ == "__main__":
    main()

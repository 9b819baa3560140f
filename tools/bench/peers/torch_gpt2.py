#!/usr/bin/env python3
"""PyTorch peers of chunkzero's train job: GPT-2 with DDP and with FSDP2.

The shape docs/PERFORMANCE.md compares on: 6 layers x 512, 8 heads, context
256, vocab 8192, 2 ranks x batch 2, AdamW, trained with torch DDP and with
FSDP2 (`fully_shard`) over gloo, in f32 and in bf16 autocast (matrix
products in bf16, the rest in f32, as `torch.autocast("cpu",
dtype=torch.bfloat16)` does). One process per rank, each with cores /
ranks threads, as chunkzero's ranks get. Prints one line per run:

  torch ddp f32: 0.812 s per step, 1261 tokens/s, 179.2 model GFLOP/s

Model FLOPs count as chunkzero's summary counts them (6 Psi + 12 L T C per
token, Psi with the tied embedding counted once).

PyTorch is not a chunkzero dependency: run this from a throw-away virtual
environment, e.g.
  python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch
  /tmp/torchenv/bin/python tools/bench/peers/torch_gpt2.py
"""

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(
            F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, layers, c, heads, context, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(context, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        # GPT-2's initialisation (as chunkzero's model and Hugging Face's):
        # N(0, 0.02), the residual projections scaled by 1/sqrt(2 L), zero
        # biases. PyTorch's defaults (N(0, 1) embeddings, tied to the
        # output) give a first loss in the hundreds and subnormal grads
        # that slow every later step.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if "proj" in name else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # Tied, as GPT-2's.
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                               targets.view(-1))


def model_flops_per_token(model, layers, c, context):
    psi = sum(p.numel() for p in model.parameters())
    return 6.0 * psi + 12.0 * layers * context * c


def run_rank(rank, args, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    torch.manual_seed(0)
    model = Gpt2(args.layers, args.d_model, args.heads, args.seq_len,
                 args.vocab)
    flops = model_flops_per_token(model, args.layers, args.d_model,
                                  args.seq_len)
    if args.wrapper == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block)
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
            loss = model(tokens, targets)
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

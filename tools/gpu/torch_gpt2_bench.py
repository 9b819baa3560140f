"""The PyTorch baseline for the GPU train benchmark (tools/gpu/train_checks.sh).

GPT-2 as chunkzero trains it (pre-LayerNorm blocks, tanh GELU, tied output
projection, no dropout), run eagerly with scaled_dot_product_attention,
bf16 autocast and AdamW on one GPU, on random tokens of the same batch; and
the GPU's bf16 matrix-product rate (cuBLAS, 8192^3) measured in the same
run. Prints one JSON object:

  {"step_ms": ..., "tokens_per_s": ..., "gemm_tflops": ..., "torch": ...}

Usage: python3 torch_gpt2_bench.py LAYERS D_MODEL HEADS SEQ VOCAB BATCH STEPS
"""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class Gpt2(nn.Module):
    def __init__(self, layers, c, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        # GPT-2's initialisation, as chunkzero's: matrices ~ N(0, 0.02).
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                               targets.view(-1))


def gemm_tflops(n=8192, reps=20):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


def main():
    layers, c, heads, seq, vocab, batch, steps = map(int, sys.argv[1:8])
    torch.manual_seed(0)
    model = Gpt2(layers, c, heads, seq, vocab).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, vocab, (batch, seq), device="cuda")
    targets = torch.randint(0, vocab, (batch, seq), device="cuda")
    times = []
    for step in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    steady = sorted(times[2:]) if len(times) > 2 else sorted(times)
    step_s = steady[len(steady) // 2]
    print(json.dumps({
        "step_ms": step_s * 1e3,
        "tokens_per_s": batch * seq / step_s,
        "loss": float(loss.detach()),
        "gemm_tflops": gemm_tflops(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "peak_bytes": torch.cuda.max_memory_allocated(),
    }))


if __name__ == "__main__":
    main()

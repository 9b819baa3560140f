#!/usr/bin/env python3
"""chunkzero's Llama against Hugging Face transformers, step by step.

Makes a small Llama (grouped-query attention, rope_theta 500000) with
transformers, saves it with save_pretrained, trains it for --steps steps
with chunkzero's train job (--init from that directory, 2 ranks, sharded,
fp32, AdamW, a constant rate) and with LlamaForCausalLM + torch.optim.AdamW
on the same data in the same order (README, "Data order"), and prints each
step's two losses and their relative difference. Then it loads chunkzero's
--export with from_pretrained and compares the next step's loss on it with
the PyTorch run's. Prints, last:

  max relative loss difference over 8 steps: 3.1e-07 (target 1e-05): met
  export's next-step loss vs PyTorch's: 2.0e-07 (target 1e-06): met

and exits 1 when a target is missed.

PyTorch and transformers are not chunkzero dependencies: run this from a
throw-away virtual environment, after building the train job, e.g.
  python3 -m venv /tmp/torchenv
  /tmp/torchenv/bin/pip install torch transformers safetensors
  bazel build -c opt //tools:train
  /tmp/torchenv/bin/python tools/bench/peers/hf_llama_losses.py
"""

import argparse
import array
import json
import os
import random
import subprocess
import sys
import tempfile

import torch
import transformers


def batches(tokens, step, batch, seq):
    """Step `step`'s global batch, as chunkzero's data order cuts it."""
    n = len(tokens)
    inputs, targets = [], []
    for j in range(batch):
        q = step * batch + j
        start = (q * seq) % (n - seq)
        inputs.append(tokens[start:start + seq])
        targets.append(tokens[start + 1:start + seq + 1])
    return torch.tensor(inputs), torch.tensor(targets)


def loss_of(model, inputs, targets):
    logits = model(input_ids=inputs).logits
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", default="bazel-bin/tools/train/train")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    work = tempfile.mkdtemp(prefix="hf_llama_")
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=352,
        num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
        max_position_embeddings=64, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    model = transformers.LlamaForCausalLM(config).float()
    init = os.path.join(work, "init")
    model.save_pretrained(init)

    rng = random.Random(1)
    tokens = [rng.randrange(256) for _ in range(20000)]
    token_file = os.path.join(work, "tokens.u16")
    with open(token_file, "wb") as f:
        array.array("H", tokens).tofile(f)

    world, per_rank, seq = 2, 2, 32
    exported = os.path.join(work, "export")
    metrics = os.path.join(work, "metrics.jsonl")
    command = [
        args.train, f"--init={init}", f"--tokens={token_file}",
        f"--world_size={world}", f"--batch={per_rank}", f"--seq_len={seq}",
        "--storage=sharded", "--precision=fp32", "--optimizer=adamw",
        f"--lr={args.lr}", f"--min_lr={args.lr}", "--warmup=0", "--clip=0",
        f"--steps={args.steps}", f"--export={exported}",
        f"--metrics_out={metrics}"]
    print(" ".join(command))
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        ours = [json.loads(line)["loss"] for line in f if line.strip()]

    reference = transformers.LlamaForCausalLM.from_pretrained(
        init, torch_dtype=torch.float32, attn_implementation="eager")
    reference.train()
    opt = torch.optim.AdamW(reference.parameters(), lr=args.lr)
    global_batch = world * per_rank
    worst = 0.0
    print("step  chunkzero    transformers  rel. diff")
    for step in range(args.steps):
        inputs, targets = batches(tokens, step, global_batch, seq)
        loss = loss_of(reference, inputs, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        diff = abs(ours[step] - loss.item()) / abs(loss.item())
        worst = max(worst, diff)
        print(f"{step + 1:4d}  {ours[step]:.7f}  {loss.item():.7f}  "
              f"{diff:.2e}")

    inputs, targets = batches(tokens, args.steps, global_batch, seq)
    with torch.no_grad():
        after = transformers.LlamaForCausalLM.from_pretrained(
            exported, torch_dtype=torch.float32, attn_implementation="eager")
        theirs = loss_of(reference, inputs, targets).item()
        mine = loss_of(after, inputs, targets).item()
    export_diff = abs(mine - theirs) / abs(theirs)
    print(f"next step on the export: {mine:.7f}, PyTorch's run: {theirs:.7f}")
    ok_losses = worst <= 1e-5
    ok_export = export_diff <= 1e-6
    print(f"max relative loss difference over {args.steps} steps: "
          f"{worst:.1e} (target 1e-05): {'met' if ok_losses else 'NOT MET'}")
    print(f"export's next-step loss vs PyTorch's: {export_diff:.1e} "
          f"(target 1e-06): {'met' if ok_export else 'NOT MET'}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    sys.exit(0 if ok_losses and ok_export else 1)


if __name__ == "__main__":
    main()

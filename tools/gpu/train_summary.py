"""Writes OUT/train.json from the train checks' runs so far.

Usage: python3 train_summary.py WORK OUT [--verdict]

train_checks.sh calls this after every run, so that a run cut short still
leaves every figure a finished run gave. WORK holds codes.txt ("NAME EXIT"
or "NAME skipped" per run), NAME.jsonl (the train job's --metrics_out) and
bench_torch.out (torch_gpt2_bench.py's JSON line). Each figure is recorded
with its pass line and whether it meets it, whether or not it does:
"correctness" lines decide the exit code, "speed" lines are recorded only.
With --verdict, exits 1 if a run that was not skipped failed or a
correctness line is not met.

The f32 parity line, 1e-5 relative on every step's loss: the GPU sums the
same products in other orders than the CPU; reordering a sum of K f32 terms
moves it by about sqrt(K) 2^-24 relative (K <= 512 here: ~1.4e-6), which
two layers, their backward and five Adam steps multiply a little, while a
defect (a lost element, a missed scale, a stale chunk) shows at 1e-3 or
more (docs/PERFORMANCE.md).
"""
import json
import os
import sys

PARITY_LINE = 1e-5
MFU_LINE = 0.30
VS_TORCH_LINE = 1.0
SHARED_LINE = 1.2
CAP_BYTES = 32 << 20
TIERS_HOST_BYTES = 20 << 20


def metrics(work, name):
    try:
        with open(os.path.join(work, name + ".jsonl")) as f:
            return [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []


def line(value, op, bound, kind):
    met = None
    if value is not None:
        met = {"<=": value <= bound, "<": value < bound,
               ">=": value >= bound}[op]
    return {"value": value, "line": f"{op} {bound}", "met": met,
            "kind": kind}


def max_relative(reference, other):
    if not reference or len(reference) != len(other):
        return None
    return max(abs(o - r) / abs(r) for r, o in zip(reference, other))


def summarize(work):
    result = {"exit": {}, "skipped": [], "lines": {}}
    try:
        with open(os.path.join(work, "codes.txt")) as f:
            for text in f:
                parts = text.split()
                if len(parts) != 2:
                    continue
                if parts[1] == "skipped":
                    result["skipped"].append(parts[0])
                else:
                    result["exit"][parts[0]] = int(parts[1])
    except OSError:
        pass
    lines = result["lines"]

    parity = {}
    cpu_1 = [m["loss"] for m in metrics(work, "parity_cpu_1")]
    for name, cpu_run, gpu_run in (
            ("world_1", "parity_cpu_1", "parity_gpu_1"),
            ("world_2", "parity_cpu_2", "parity_gpu_2"),
            ("world_1_fused_attention", "parity_cpu_1", "parity_gpu_1_fused"),
            ("llama_world_1", "llama_cpu_1", "llama_gpu_1")):
        cpu = [m["loss"] for m in metrics(work, cpu_run)]
        gpu = [m["loss"] for m in metrics(work, gpu_run)]
        if not cpu and not gpu:
            continue
        diff = max_relative(cpu, gpu)
        parity[name] = {"cpu_losses": cpu, "gpu_losses": gpu,
                        "max_relative_difference": diff}
        if gpu:
            lines["parity_" + name] = line(diff, "<=", PARITY_LINE,
                                           "correctness")
    result["parity_f32"] = parity

    capped = metrics(work, "capped")
    if capped:
        peak = max(r["device_peak_bytes"] for m in capped for r in m["ranks"])
        result["capped"] = {"cap_bytes": CAP_BYTES, "device_peak_bytes": peak,
                            "losses": [m["loss"] for m in capped]}
        lines["capped_peak_bytes"] = line(peak, "<=", CAP_BYTES,
                                          "correctness")

    # The capped job again with --offload=nvme under a host limit: three
    # tiers (device, host, disk). Each memory within its limit, and the
    # losses of the capped run (--offload=params) exactly: the same
    # kernels on the same values, only their resting places differ.
    tiers = metrics(work, "nvme_tiers")
    if tiers:
        device_peak = max(r["device_peak_bytes"]
                          for m in tiers for r in m["ranks"])
        host_peak = max(r.get("host_peak_bytes", 0)
                        for m in tiers for r in m["ranks"])
        losses = [m["loss"] for m in tiers]
        result["nvme_tiers"] = {
            "cap_bytes": CAP_BYTES, "host_limit_bytes": TIERS_HOST_BYTES,
            "device_peak_bytes": device_peak, "host_peak_bytes": host_peak,
            "losses": losses}
        lines["nvme_tiers_device_peak_bytes"] = line(
            device_peak, "<=", CAP_BYTES, "correctness")
        lines["nvme_tiers_host_peak_bytes"] = line(
            host_peak, "<=", TIERS_HOST_BYTES, "correctness")
        if capped:
            lines["nvme_tiers_vs_capped_losses"] = line(
                max_relative([m["loss"] for m in capped], losses), "<=", 0.0,
                "correctness")

    # 124M: 6 psi + 12 L T C model FLOPs per token (GptModelFlopsPerStep).
    L, C, T, V, B = 12, 768, 1024, 50257, 8
    psi = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    flops_per_step = (6 * psi + 12 * L * T * C) * B * T
    bench = {"model_flops_per_step": flops_per_step}
    ours = metrics(work, "bench_ours")
    if len(ours) >= 3:
        steady = sorted(m["step_time_s"] for m in ours[2:])
        bench["ours_step_ms"] = steady[len(steady) // 2] * 1e3
    if ours:
        bench["ours_losses"] = [m["loss"] for m in ours]
    torch = None
    try:
        with open(os.path.join(work, "bench_torch.out")) as f:
            torch = json.loads(f.read().strip().splitlines()[-1])
        bench["torch"] = torch
    except (OSError, ValueError, IndexError):
        torch = None
    shared = metrics(work, "bench_shared")
    if len(shared) >= 3 and "ours_step_ms" in bench:
        steady = sorted(m["step_time_s"] for m in shared[2:])
        bench["shared_2_ranks_step_ms"] = steady[len(steady) // 2] * 1e3
        bench["shared_vs_world_1_per_sample"] = (
            bench["shared_2_ranks_step_ms"] / bench["ours_step_ms"])
        lines["shared_vs_world_1_per_sample"] = line(
            bench["shared_vs_world_1_per_sample"], "<=", SHARED_LINE, "speed")
    if torch and "gemm_tflops" in torch and "step_ms" in torch:
        rate = torch["gemm_tflops"] * 1e12
        bench["torch_mfu"] = flops_per_step / (torch["step_ms"] / 1e3) / rate
        if "ours_step_ms" in bench:
            bench["ours_mfu"] = (flops_per_step / (bench["ours_step_ms"] / 1e3)
                                 / rate)
            bench["ours_vs_torch"] = bench["ours_step_ms"] / torch["step_ms"]
            lines["ours_mfu"] = line(bench["ours_mfu"], ">=", MFU_LINE,
                                     "speed")
            lines["ours_vs_torch"] = line(bench["ours_vs_torch"], "<",
                                          VS_TORCH_LINE, "speed")
    result["bench_124m_bf16"] = bench
    return result


def main():
    work, out = sys.argv[1:3]
    result = summarize(work)
    failed = sorted(name for name, rc in result["exit"].items() if rc != 0)
    missed = sorted(name for name, l in result["lines"].items()
                    if l["kind"] == "correctness" and l["met"] is False)
    result["failed_runs"] = failed
    result["missed_correctness_lines"] = missed
    tmp = os.path.join(out, "train.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, os.path.join(out, "train.json"))
    if "--verdict" in sys.argv[3:]:
        print(json.dumps({"exit": result["exit"], "skipped": result["skipped"],
                          "failed_runs": failed,
                          "missed_correctness_lines": missed}))
        sys.exit(1 if failed or missed else 0)


if __name__ == "__main__":
    main()

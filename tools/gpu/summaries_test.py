"""Tests summarize.py and train_summary.py, the GPU run's summarizers, on
runs written here: figures recorded whether or not they meet their lines,
the verdict, skipped GPU runs, binaries that crashed."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def jsonl(losses, peak=0, step_time=0.1):
    return "".join(
        json.dumps({"loss": l, "step_time_s": step_time,
                    "ranks": [{"device_peak_bytes": peak}]}) + "\n"
        for l in losses)


class TrainSummaryTest(unittest.TestCase):

    def setUp(self):
        self.out = tempfile.mkdtemp()
        self.work = os.path.join(self.out, "train")
        os.makedirs(self.work)

    def run_summary(self):
        p = subprocess.run(
            [sys.executable, os.path.join(HERE, "train_summary.py"),
             self.work, self.out, "--verdict"],
            capture_output=True, text=True)
        with open(os.path.join(self.out, "train.json")) as f:
            return p.returncode, json.load(f)

    def test_parity_within_line_passes(self):
        write(os.path.join(self.work, "codes.txt"),
              "parity_cpu_1 0\nparity_gpu_1 0\n")
        write(os.path.join(self.work, "parity_cpu_1.jsonl"), jsonl([5.0, 4.0]))
        write(os.path.join(self.work, "parity_gpu_1.jsonl"),
              jsonl([5.0 * (1 + 4e-6), 4.0]))
        rc, result = self.run_summary()
        self.assertEqual(rc, 0)
        line = result["lines"]["parity_world_1"]
        self.assertAlmostEqual(line["value"], 4e-6, places=12)
        self.assertEqual(line["line"], "<= 1e-05")
        self.assertIs(line["met"], True)
        self.assertEqual(result["missed_correctness_lines"], [])

    def test_llama_parity_has_its_own_line(self):
        write(os.path.join(self.work, "codes.txt"),
              "llama_cpu_1 0\nllama_gpu_1 0\n")
        write(os.path.join(self.work, "llama_cpu_1.jsonl"), jsonl([6.0, 5.0]))
        write(os.path.join(self.work, "llama_gpu_1.jsonl"),
              jsonl([6.0, 5.0 * (1 + 2e-5)]))
        rc, result = self.run_summary()
        self.assertEqual(rc, 1)
        line = result["lines"]["parity_llama_world_1"]
        self.assertAlmostEqual(line["value"], 2e-5, places=12)
        self.assertIs(line["met"], False)
        self.assertEqual(result["parity_f32"]["llama_world_1"]["cpu_losses"],
                         [6.0, 5.0])
        self.assertEqual(result["missed_correctness_lines"],
                         ["parity_llama_world_1"])

    def test_parity_beyond_line_is_recorded_and_fails(self):
        write(os.path.join(self.work, "codes.txt"),
              "parity_cpu_1 0\nparity_gpu_1 0\n")
        write(os.path.join(self.work, "parity_cpu_1.jsonl"), jsonl([5.0, 4.0]))
        write(os.path.join(self.work, "parity_gpu_1.jsonl"),
              jsonl([5.0, 4.004]))
        rc, result = self.run_summary()
        self.assertEqual(rc, 1)
        self.assertAlmostEqual(result["lines"]["parity_world_1"]["value"],
                               1e-3, places=12)
        self.assertIs(result["lines"]["parity_world_1"]["met"], False)
        self.assertEqual(result["missed_correctness_lines"],
                         ["parity_world_1"])

    def test_capped_peak_over_the_cap_fails(self):
        write(os.path.join(self.work, "codes.txt"), "capped 0\n")
        write(os.path.join(self.work, "capped.jsonl"),
              jsonl([7.0, 6.5], peak=(32 << 20) + 1))
        rc, result = self.run_summary()
        self.assertEqual(rc, 1)
        self.assertEqual(result["capped"]["device_peak_bytes"], (32 << 20) + 1)
        self.assertEqual(result["lines"]["capped_peak_bytes"]["met"], False)

    def test_three_tiers_match_the_capped_run_within_both_limits(self):
        write(os.path.join(self.work, "codes.txt"),
              "capped 0\nnvme_tiers 0\n")
        write(os.path.join(self.work, "capped.jsonl"),
              jsonl([7.0, 6.5], peak=30 << 20))
        tiers = "".join(
            json.dumps({"loss": l, "step_time_s": 0.1,
                        "ranks": [{"device_peak_bytes": 31 << 20,
                                   "host_peak_bytes": host}]}) + "\n"
            for l, host in ((7.0, 19 << 20), (6.5, (20 << 20) + 1)))
        write(os.path.join(self.work, "nvme_tiers.jsonl"), tiers)
        rc, result = self.run_summary()
        self.assertEqual(rc, 1)
        lines = result["lines"]
        self.assertIs(lines["nvme_tiers_device_peak_bytes"]["met"], True)
        self.assertEqual(lines["nvme_tiers_host_peak_bytes"]["value"],
                         (20 << 20) + 1)
        self.assertIs(lines["nvme_tiers_host_peak_bytes"]["met"], False)
        self.assertEqual(lines["nvme_tiers_vs_capped_losses"]["value"], 0.0)
        self.assertIs(lines["nvme_tiers_vs_capped_losses"]["met"], True)
        self.assertEqual(result["missed_correctness_lines"],
                         ["nvme_tiers_host_peak_bytes"])
        self.assertEqual(result["nvme_tiers"]["losses"], [7.0, 6.5])

    def test_speed_lines_are_recorded_not_enforced(self):
        write(os.path.join(self.work, "codes.txt"),
              "bench_ours 0\nbench_torch 0\n")
        # Steps 3.. take 0.5 s; torch 250 ms at 100 TFLOP/s.
        write(os.path.join(self.work, "bench_ours.jsonl"),
              jsonl([10, 9, 8, 7], step_time=0.5))
        write(os.path.join(self.work, "bench_torch.out"),
              "log line\n" + json.dumps({"step_ms": 250.0,
                                         "gemm_tflops": 100.0}) + "\n")
        rc, result = self.run_summary()
        self.assertEqual(rc, 0)
        bench = result["bench_124m_bf16"]
        self.assertEqual(bench["ours_step_ms"], 500.0)
        self.assertEqual(bench["ours_vs_torch"], 2.0)
        self.assertEqual(result["lines"]["ours_vs_torch"],
                         {"value": 2.0, "line": "< 1.0", "met": False,
                          "kind": "speed"})
        self.assertAlmostEqual(
            result["lines"]["ours_mfu"]["value"],
            bench["model_flops_per_step"] / 0.5 / 100e12)

    def test_skipped_and_cut_runs(self):
        write(os.path.join(self.work, "codes.txt"),
              "parity_cpu_1 0\nparity_gpu_1 skipped\nbench_ours 124\n")
        write(os.path.join(self.work, "parity_cpu_1.jsonl"), jsonl([5.0]))
        rc, result = self.run_summary()
        self.assertEqual(rc, 1)
        self.assertEqual(result["skipped"], ["parity_gpu_1"])
        self.assertEqual(result["failed_runs"], ["bench_ours"])
        self.assertNotIn("parity_world_1", result["lines"])

    def test_no_runs_yet(self):
        rc, result = self.run_summary()
        self.assertEqual(rc, 0)
        self.assertEqual(result["exit"], {})


class SummarizeTest(unittest.TestCase):

    def test_binaries_benchmarks_and_train(self):
        out = tempfile.mkdtemp()
        write(os.path.join(out, "exit_codes.txt"),
              "a_test 0\ncrashed_test 139\nfailing_test 1\n")
        write(os.path.join(out, "gtest", "a_test.json"), json.dumps(
            {"testsuites": [{"name": "S", "testsuite": [
                {"name": "Gpu", "result": "SKIPPED"},
                {"name": "Cpu", "result": "COMPLETED"}]}]}))
        write(os.path.join(out, "gtest", "failing_test.json"), json.dumps(
            {"testsuites": [{"name": "S", "testsuite": [
                {"name": "Bad", "result": "COMPLETED",
                 "failures": [{"failure": "x"}]}]}]}))
        write(os.path.join(out, "bench", "b.json"), json.dumps(
            {"benchmarks": [{"name": "BM_X", "real_time": 2.0,
                             "time_unit": "ms", "vs_copy": 0.9}]}))
        write(os.path.join(out, "bench", "cut.json"), '{"benchmarks": [')
        write(os.path.join(out, "train.json"), json.dumps({"exit": {"x": 0}}))
        here = tempfile.mkdtemp()
        write(os.path.join(here, "commit.txt"), "abc123\n")
        p = subprocess.run(
            [sys.executable, os.path.join(HERE, "summarize.py"), out, here],
            capture_output=True, text=True, check=True)
        self.assertEqual(p.stdout.strip(), "1 passed, 2 failed, 1 skipped")
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["commit"], "abc123")
        rows = {r["name"]: r for r in summary["binaries"]}
        self.assertEqual((rows["a_test"]["passed"], rows["a_test"]["skipped"]),
                         (1, 1))
        self.assertEqual(rows["crashed_test"]["failed"], 1)
        self.assertIn("exit 139", rows["crashed_test"]["failures"][0])
        self.assertEqual(rows["failing_test"]["failures"], ["S.Bad"])
        self.assertEqual(summary["benchmarks"], [
            {"name": "BM_X", "real_time": 2.0, "time_unit": "ms",
             "vs_copy": 0.9},
            {"name": "cut", "error_message": "unreadable JSON (timed out?)"}])
        self.assertEqual(summary["train"], {"exit": {"x": 0}})


if __name__ == "__main__":
    unittest.main()

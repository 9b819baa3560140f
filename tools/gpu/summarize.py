"""Writes OUT/summary.json from what a GPU bundle's run.sh has so far.

Usage: python3 summarize.py OUT BUNDLE_DIR

run.sh calls this after every binary, so that a run cut short still leaves
a summary of everything that finished. Reads OUT/exit_codes.txt (one
"NAME EXIT" line per test binary), OUT/gtest/NAME.json, OUT/bench/NAME.json
and OUT/train.json; writes OUT/summary.json and OUT/bench.json (every
benchmark's JSON, by binary) and prints the totals as one line.
"""
import json
import os
import sys


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def test_rows(out):
    codes = {}
    try:
        with open(os.path.join(out, "exit_codes.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    codes[parts[0]] = int(parts[1])
    except OSError:
        pass
    rows = []
    for name, rc in codes.items():
        row = {"name": name, "exit": rc, "passed": 0, "failed": 0,
               "skipped": 0, "failures": []}
        data = read_json(os.path.join(out, "gtest", name + ".json"))
        suites = data.get("testsuites", []) if data else None
        if suites is not None:
            for suite in suites:
                for test in suite.get("testsuite", []):
                    full = suite["name"] + "." + test["name"]
                    if test.get("result") == "SKIPPED":
                        row["skipped"] += 1
                    elif test.get("failures"):
                        row["failed"] += 1
                        row["failures"].append(full)
                    else:
                        row["passed"] += 1
        if rc != 0 and row["failed"] == 0:
            # Crashed, timed out or failed outside a test: one failure.
            row["failed"] += 1
            row["failures"].append(
                "(exit %d: crashed, timed out or failed outside a test)" % rc)
        rows.append(row)
    return rows


def bench_rows(out):
    rows, everything = [], {}
    folder = os.path.join(out, "bench")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for file in names:
        if not file.endswith(".json"):
            continue
        data = read_json(os.path.join(folder, file))
        if data is None:  # Cut short by its timeout.
            rows.append({"name": file[:-len(".json")],
                         "error_message": "unreadable JSON (timed out?)"})
            continue
        everything[file[:-len(".json")]] = data
        for b in data.get("benchmarks", []):
            row = {k: b[k] for k in ("name", "label", "real_time", "time_unit")
                   if k in b}
            for k in ("GB/s", "copy_GB/s", "vs_copy", "vs_slower", "overhead",
                      "error_message"):
                if k in b:
                    row[k] = b[k]
            rows.append(row)
    return rows, everything


def main():
    out, here = sys.argv[1:3]
    commit = None
    try:
        with open(os.path.join(here, "commit.txt")) as f:
            commit = f.read().strip()
    except OSError:
        pass
    summary = {"commit": commit, "binaries": test_rows(out),
               "totals": {"passed": 0, "failed": 0, "skipped": 0}}
    for row in summary["binaries"]:
        for key in ("passed", "failed", "skipped"):
            summary["totals"][key] += row[key]
    summary["benchmarks"], everything = bench_rows(out)
    summary["train"] = read_json(os.path.join(out, "train.json"))
    for name, data in (("bench.json", everything), ("summary.json", summary)):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, os.path.join(out, name))
    t = summary["totals"]
    print(f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped")


if __name__ == "__main__":
    main()

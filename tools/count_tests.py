#!/usr/bin/env python3
"""Counts test cases after `bazel test --test_summary=short`.

Usage: count_tests.py BAZEL_LOG TESTLOGS_DIR
Prints "PASSED FAILED SKIPPED" (test cases). For each target Bazel reports,
the GoogleTest XML under TESTLOGS_DIR gives the case counts; a target with
no XML (failed to build, timed out, crashed before writing it) counts as one
failed case, so nothing that broke can vanish from the total.
"""

import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

STATUS = re.compile(
    r"^(//\S+)\s+(?:\(cached\)\s+)?"
    r"(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD|INCOMPLETE|"
    r"REMOTE FAILURE|BUILD FAILED)\b")


def xml_counts(path):
    passed = failed = skipped = 0
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") in ("skipped", "suppressed") or \
                case.get("status") == "notrun" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def current_xmls(target_dir):
    """The test.xml files of the target's latest run.

    Bazel keeps <target>/test.xml, or shard_I_of_N/test.xml when sharded,
    and run_I_of_N/ directories for --runs_per_test; directories from older
    invocations (another shard count, a --runs_per_test run) stay behind, so
    only the newest layout is read.
    """
    top = os.path.join(target_dir, "test.xml")
    shards = glob.glob(os.path.join(target_dir, "shard_*_of_*", "test.xml"))
    candidates = ([top] if os.path.exists(top) else []) + shards
    if not candidates:
        return glob.glob(os.path.join(target_dir, "run_*", "**", "test.xml"),
                         recursive=True)
    newest = max(candidates, key=os.path.getmtime)
    if newest == top:
        return [top]
    total = re.search(r"shard_\d+_of_(\d+)", newest).group(1)
    return [x for x in shards if x.split(os.sep)[-2].endswith("_of_" + total)]


def main():
    log_path, testlogs = sys.argv[1], sys.argv[2]
    passed = failed = skipped = 0
    with open(log_path, errors="replace") as log:
        lines = log.read().splitlines()
    build_failed = any(l.startswith("ERROR:") for l in lines)
    seen = 0
    for line in lines:
        match = STATUS.match(line.strip())
        if not match:
            continue
        seen += 1
        label, status = match.groups()
        target_dir = os.path.join(testlogs, label[2:].replace(":", "/"))
        xmls = current_xmls(target_dir)
        counts = [xml_counts(x) for x in xmls if os.path.getsize(x) > 0]
        case_failed = sum(c[1] for c in counts)
        if status in ("PASSED", "FLAKY") and counts:
            passed += sum(c[0] for c in counts)
            skipped += sum(c[2] for c in counts)
            failed += case_failed
        else:
            passed += sum(c[0] for c in counts) if status == "FAILED" else 0
            failed += max(case_failed, 1)
    if seen == 0 and build_failed:
        failed += 1  # Nothing ran because the build broke.
    print(passed, failed, skipped)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fails a ctest run that passed by not running things (scripts/test.sh).

ctest exits 0 when a test skips (GTEST_SKIP, SKIP_RETURN_CODE), so a missing
model, tool or download could turn a whole suite green without one assertion.
Reads the run's JUnit file (ctest --output-junit) and the tests' labels
(ctest --show-only=json-v1) and fails if any test was skipped or not run,
unless one of its labels is on the allowlist (tests/skip_allowlist.txt) with
its reason. An allowed skip whose output shows a gtest failure counts as a
failure: ctest marks a test skipped whenever "[  SKIPPED ]" is in its output
(gtest_discover_tests' SKIP_REGULAR_EXPRESSION), whatever its exit code, so a
test that skips after something failed (a failure in its suite's set-up or
tear-down, in an environment, or before the skip in a gtest that lets the
skip win) would pass for an allowed skip. Also prints the slowest tests:
where the run's time went.

usage: check_ctest_run.py JUNIT_XML TESTS_JSON ALLOWLIST
"""
import json
import re
import sys
import xml.etree.ElementTree as ET


def allowlist(path):
    allowed = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                label, _, reason = line.partition("\t")
                allowed[label.strip()] = reason.strip()
    return allowed


def labels_by_test(path):
    with open(path, encoding="utf-8") as f:
        tests = json.load(f)["tests"]
    labels = {}
    for t in tests:
        for p in t.get("properties", []):
            if p.get("name") == "LABELS":
                labels[t["name"]] = list(p.get("value", []))
        labels.setdefault(t["name"], [])
    return labels


# What gtest prints for a failed assertion ("file:line: Failure") and for a
# failed test or suite ("[  FAILED  ] ...").
GTEST_FAILURE = re.compile(r"^(.*: Failure|\[  FAILED  \] .*)$", re.MULTILINE)


def failed_output(case):
    """The first gtest failure line in a test case's output, or None."""
    m = GTEST_FAILURE.search(case.findtext("system-out") or "")
    return m.group(0) if m else None


def main(junit, tests_json, allow_path):
    allowed = allowlist(allow_path)
    labels = labels_by_test(tests_json)
    cases = ET.parse(junit).getroot().iter("testcase")
    ran, skipped_ok, bad, failed_skips, times = 0, [], [], [], []
    for case in cases:
        name = case.get("name")
        status = case.get("status", "run")
        times.append((float(case.get("time") or 0), name))
        not_run = status in ("notrun", "disabled") or case.find("skipped") is not None
        if not not_run:
            ran += 1
            continue
        why = [l for l in labels.get(name, []) if l in allowed]
        failure = failed_output(case)
        if failure:
            failed_skips.append((name, failure))
        else:
            (skipped_ok if why else bad).append((name, why))
    times.sort(reverse=True)
    print("slowest tests (s):")
    for t, name in times[:12]:
        print(f"  {t:8.1f}  {name}")
    for name, why in skipped_ok:
        print(f"allowed skip: {name} ({why[0]}: {allowed[why[0]]})")
    if ran == 0:
        print("check_ctest_run: no test ran", file=sys.stderr)
        return 1
    if failed_skips:
        print(f"check_ctest_run: {len(failed_skips)} test(s) failed, then skipped (a failure, "
              f"whatever the allowlist says):", file=sys.stderr)
        for name, failure in failed_skips:
            print(f"  {name}: {failure}", file=sys.stderr)
    if bad:
        print(f"check_ctest_run: {len(bad)} test(s) skipped or not run outside "
              f"{allow_path}:", file=sys.stderr)
        for name, _ in bad:
            print(f"  {name} (labels: {', '.join(labels.get(name, [])) or 'none'})", file=sys.stderr)
    if failed_skips or bad:
        return 1
    print(f"check_ctest_run: {ran} ran, {len(skipped_ok)} allowed skips, none other skipped")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))

#!/usr/bin/env python3
"""unittest discovery that fails on a skipped test (scripts/test.sh).

`python -m unittest` calls a run with skips a success; here a skip is a check
that did not happen, so it fails the run unless SPECLINE_ALLOW_SKIPS=1, which
CI=true refuses (CI passes only when every check ran).

usage: unittest_strict.py START_DIR
"""
import os
import sys
import unittest


def main(start_dir):
    if os.environ.get("CI") == "true" and os.environ.get("SPECLINE_ALLOW_SKIPS") == "1":
        print("unittest_strict: SPECLINE_ALLOW_SKIPS=1 is refused with CI=true: CI passes only "
              "when every check ran", file=sys.stderr)
        return 2
    suite = unittest.defaultTestLoader.discover(start_dir)
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    if not result.wasSuccessful():
        return 1
    if result.testsRun == 0:
        print("unittest_strict: no test ran", file=sys.stderr)
        return 1
    if result.skipped and os.environ.get("SPECLINE_ALLOW_SKIPS") != "1":
        print(f"unittest_strict: {len(result.skipped)} test(s) skipped:", file=sys.stderr)
        for test, why in result.skipped:
            print(f"  {test.id()}: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))

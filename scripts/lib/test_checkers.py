#!/usr/bin/env python3
"""Self-test of scripts/test.sh's own checks (run in its python phase).

check_ctest_run.py against ctest JUnit files as ctest 3.25 writes them for
gtest 1.12 (the outputs below are real ones, trimmed): a plain skip of an
allowed label passes, any other skip fails, and a test that failed and then
skipped fails even under an allowed label. unittest_strict.py fails on a
skip, and it and scripts/test.sh refuse SPECLINE_ALLOW_SKIPS=1 under CI=true.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import check_ctest_run  # noqa: E402

SKIPPED = """[ RUN      ] Cuda.Kernel
/src/tests/cuda_kernels_test.cc:10: Skipped
no CUDA device: skipped
[  SKIPPED ] Cuda.Kernel (0 ms)
[==========] 1 test from 1 test suite ran. (0 ms total)
[  PASSED  ] 0 tests.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] Cuda.Kernel
"""

# A skip in the test, a failure in its suite's TearDownTestSuite: gtest
# exits 1, and ctest still reads "[  SKIPPED ]" as a skip.
SKIPPED_THEN_SUITE_FAILED = """[ RUN      ] Cuda.Kernel
/src/tests/cuda_kernels_test.cc:10: Skipped
no CUDA device: skipped
[  SKIPPED ] Cuda.Kernel (0 ms)
/src/tests/cuda_kernels_test.cc:5: Failure
Failed
teardown broke
[==========] 1 test from 1 test suite ran. (0 ms total)
[  PASSED  ] 0 tests.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] Cuda.Kernel
[  FAILED  ] 0 tests, listed below:

 0 FAILED TESTS
[  FAILED  ] Cuda: SetUpTestSuite or TearDownTestSuite
"""

# A failed assertion, then GTEST_SKIP (a gtest that lets the skip win would
# print only the SKIPPED lines after the failure).
FAILED_THEN_SKIPPED = """[ RUN      ] Cuda.Kernel
/src/tests/cuda_kernels_test.cc:12: Failure
Expected equality of these values:
  1
  2
/src/tests/cuda_kernels_test.cc:13: Skipped
no CUDA device: skipped
[  SKIPPED ] Cuda.Kernel (0 ms)
"""

PASSED = """[ RUN      ] Cpu.Kernel
[       OK ] Cpu.Kernel (0 ms)
[  PASSED  ] 1 test.
"""


def junit(cases):
    """A ctest JUnit file of (name, status, output) cases."""
    from xml.sax.saxutils import escape
    body = []
    for name, status, out in cases:
        inner = ""
        if status == "notrun":
            inner = '<skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>'
        elif status == "fail":
            inner = '<failure message=""/>'
        body.append(f'<testcase name="{name}" classname="{name}" time="0.01" status="{status}">'
                    f"{inner}<system-out>{escape(out)}</system-out></testcase>")
    return f'<?xml version="1.0" encoding="UTF-8"?><testsuite name="x">{"".join(body)}</testsuite>'


class CheckCtestRunTest(unittest.TestCase):
    def run_check(self, cases):
        with tempfile.TemporaryDirectory() as d:
            paths = {k: os.path.join(d, k) for k in ("junit.xml", "tests.json", "allow.txt")}
            with open(paths["junit.xml"], "w") as f:
                f.write(junit([(n, s, o) for n, s, o, _ in cases]))
            tests = [{"name": n, "properties": [{"name": "LABELS", "value": labels}]}
                     for n, _, _, labels in cases]
            with open(paths["tests.json"], "w") as f:
                json.dump({"tests": tests}, f)
            with open(paths["allow.txt"], "w") as f:
                f.write("# comment\ncuda\tno GPU here\n")
            return check_ctest_run.main(paths["junit.xml"], paths["tests.json"], paths["allow.txt"])

    def test_allowed_skip_passes(self):
        self.assertEqual(self.run_check([("Cpu.Kernel", "run", PASSED, ["cpu"]),
                                         ("Cuda.Kernel", "notrun", SKIPPED, ["cuda_kernels_test", "cuda"])]),
                         0)

    def test_skip_outside_the_allowlist_fails(self):
        self.assertEqual(self.run_check([("Cpu.Kernel", "run", PASSED, ["cpu"]),
                                         ("Gpu.Other", "notrun", SKIPPED, ["other"])]), 1)

    def test_allowed_label_that_failed_then_skipped_fails(self):
        for out in (SKIPPED_THEN_SUITE_FAILED, FAILED_THEN_SKIPPED):
            with self.subTest(out=out.splitlines()[-1]):
                self.assertEqual(self.run_check([("Cpu.Kernel", "run", PASSED, ["cpu"]),
                                                 ("Cuda.Kernel", "notrun", out, ["cuda"])]), 1)

    def test_nothing_ran_fails(self):
        self.assertEqual(self.run_check([("Cuda.Kernel", "notrun", SKIPPED, ["cuda"])]), 1)


class SkipRefusalTest(unittest.TestCase):
    def env(self, **kw):
        e = {k: v for k, v in os.environ.items() if k not in ("CI", "SPECLINE_ALLOW_SKIPS")}
        e.update(kw)
        return e

    def strict(self, env):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "test_one.py"), "w") as f:
                f.write("import unittest\n\nclass T(unittest.TestCase):\n"
                        "    def test_ran(self):\n        pass\n\n"
                        "    def test_skipped(self):\n        self.skipTest('absent')\n")
            return subprocess.run([sys.executable, os.path.join(HERE, "unittest_strict.py"), d],
                                  env=env, capture_output=True, text=True)

    def test_unittest_strict_fails_on_a_skip(self):
        self.assertEqual(self.strict(self.env()).returncode, 1)
        self.assertEqual(self.strict(self.env(SPECLINE_ALLOW_SKIPS="1")).returncode, 0)

    def test_unittest_strict_refuses_allowed_skips_on_ci(self):
        r = self.strict(self.env(CI="true", SPECLINE_ALLOW_SKIPS="1"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("refused with CI=true", r.stderr)

    def test_test_sh_refuses_allowed_skips_on_ci(self):
        # Refused before anything runs (no setup, no build).
        r = subprocess.run(["bash", os.path.join(REPO, "scripts", "test.sh")],
                           env=self.env(CI="true", SPECLINE_ALLOW_SKIPS="1"),
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("refused with CI=true", r.stderr)


if __name__ == "__main__":
    unittest.main()

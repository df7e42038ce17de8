"""The exit status of the chart test scripts (check_chart.py,
test_chart_render.py), as ctest reads it: 1 when a test failed or none ran,
77 (ctest's SKIP_RETURN_CODE; scripts/test.sh fails the run on it) when any
was skipped, with the reasons printed, else 0."""
import unittest


def run(module, argv):
    prog = unittest.main(module=module, argv=argv, exit=False, verbosity=2)
    r = prog.result
    if r.failures or r.errors or r.unexpectedSuccesses or not r.testsRun:
        return 1
    if r.skipped:
        for test, reason in r.skipped:
            print(f"SKIPPED: {test}: {reason}")
        return 77
    return 0

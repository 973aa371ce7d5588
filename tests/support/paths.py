"""Where the tests' files are, whichever folder a test sits in."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))                                      # the repository
TESTS = os.path.join(ROOT, "tests")
GOLDEN = os.path.join(TESTS, "golden")                 # golden files, per version
CROSS_RELEASE = os.path.join(TESTS, "compat", "cross_release")

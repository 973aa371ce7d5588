"""Where the tests' files are, whichever folder a test sits in."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))                                      # the repository
TESTS = os.path.join(ROOT, "tests")
GOLDEN = os.path.join(TESTS, "golden")                 # golden files, per version
CROSS_RELEASE = os.path.join(TESTS, "compat", "cross_release")


def generated_block(page: str, name: str) -> str | None:
  """The text of docs page `page` (relative to the repository) between
  `<!-- NAME -->` and `<!-- /NAME -->` lines, which code generates (a
  test compares it with the generator), or None if the page has none."""
  with open(os.path.join(ROOT, page)) as f:
    match = re.search(rf"<!-- {re.escape(name)} -->\n(.*?)<!-- /"
                      rf"{re.escape(name)} -->", f.read(), re.S)
  return None if match is None else match.group(1)

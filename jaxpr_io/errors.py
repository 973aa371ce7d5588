"""The error hierarchy of jaxpr_io.

Every error this package raises on purpose is a `JaxprIoError`. There are two
kinds, and the split tells the user whose problem it is:

* `FormatError` (a `ValueError`): the bytes being read are wrong — truncated,
  corrupted, written by a newer version, or naming something this process
  does not have. Nothing was loaded.
* `UnsupportedError` (a `TypeError`): the program being written holds
  something the format cannot represent. Nothing was written.

Messages name the place (equation index, primitive, param, file offset) and
say what to do.
"""

from __future__ import annotations


class JaxprIoError(Exception):
  """Base class of every error jaxpr_io raises on purpose."""


class FormatError(JaxprIoError, ValueError):
  """The data being read is not a valid jaxpr_io file for this reader."""


class UnsupportedError(JaxprIoError, TypeError):
  """The program holds something the format cannot represent."""

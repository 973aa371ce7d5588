"""CRC-32 of the container's parts: zlib's checksum, large buffers on
several threads (zlib.crc32 releases the GIL) with the slices' checksums
combined, which gives exactly zlib's result."""

from __future__ import annotations

import os
import threading
import zlib

# Buffers at least this large are checksummed by several threads at once
# (zlib.crc32 releases the GIL), each over one slice; the slices' CRCs are
# then combined (`combine`), which gives exactly zlib's result.
_PARALLEL_CRC_BYTES = 32 << 20
# Slices that background threads checksum while a file is written.
CRC_SLICE = 16 << 20
CRC_THREADS = max(1, min(8, os.cpu_count() or 1))


def crc32(data) -> int:
  view = memoryview(data)
  if view.nbytes >= _PARALLEL_CRC_BYTES and CRC_THREADS > 1:
    return _parallel_crc32(view)
  return zlib.crc32(view) & 0xFFFFFFFF


def _gf2_times(matrix: list[int], vector: int) -> int:
  total, i = 0, 0
  while vector:
    if vector & 1:
      total ^= matrix[i]
    vector >>= 1
    i += 1
  return total


# [k]: the GF(2) matrix (as its 32 columns) that advances a CRC-32 over
# 2**k zero bytes; built on first use, each the square of the one before.
_ZERO_POWERS: list[list[int]] = []
_ZERO_POWERS_LOCK = threading.Lock()


def _zero_power(k: int) -> list[int]:
  if k >= len(_ZERO_POWERS):
    with _ZERO_POWERS_LOCK:
      while len(_ZERO_POWERS) <= k:
        if _ZERO_POWERS:
          matrix = _ZERO_POWERS[-1]
          squarings = 1
        else:  # one zero bit (zlib's crc32_combine), squared to 8 bits
          matrix = [0xEDB88320] + [1 << n for n in range(31)]
          squarings = 3
        for _ in range(squarings):
          matrix = [_gf2_times(matrix, column) for column in matrix]
        _ZERO_POWERS.append(matrix)
  return _ZERO_POWERS[k]


def combine(crc1: int, crc2: int, length2: int) -> int:
  """CRC-32 of A + B from crc1 = CRC(A), crc2 = CRC(B) and len(B)."""
  k = 0
  while length2:
    if length2 & 1:
      crc1 = _gf2_times(_zero_power(k), crc1)
    length2 >>= 1
    k += 1
  return crc1 ^ crc2


def _parallel_crc32(view: memoryview) -> int:
  view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
  n = view.nbytes
  step = -(-n // CRC_THREADS)  # one slice per thread, in whole MiB
  step = -(-step // (1 << 20)) << 20
  bounds = [(start, min(start + step, n)) for start in range(0, n, step)]
  results: list = [None] * len(bounds)

  def run(k):
    start, stop = bounds[k]
    try:
      results[k] = zlib.crc32(view[start:stop])
    except BaseException as e:  # pylint: disable=broad-except
      results[k] = e  # raised below, in the calling thread

  threads = [threading.Thread(target=run, args=(k,), daemon=True)
             for k in range(1, len(bounds))]
  for t in threads:
    t.start()
  run(0)
  for t in threads:
    t.join()
  for part in results:
    if not isinstance(part, int):
      raise part
  total = results[0]
  for (start, stop), part in zip(bounds[1:], results[1:]):
    total = combine(total, part, stop - start)
  return total & 0xFFFFFFFF


class BackgroundCrcs:
  """The CRC-32 of each chunk of a layout, computed by `threads` threads
  started at once (zlib.crc32 releases the GIL), each taking the next
  CRC_SLICE-byte slice of the chunks in turn; `result()` has the calling
  thread take slices too, until none is left, and combines each chunk's."""

  def __init__(self, layout, threads: int):
    self._layout = layout
    self._views: list = []
    self._jobs: list[tuple[int, int, int]] = []  # (chunk, start, stop)
    for i, (chunk, known) in enumerate(zip(layout.chunks,
                                           layout.known_crcs)):
      view = memoryview(chunk)
      if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
      self._views.append(view)
      if known is None:
        n = view.nbytes
        self._jobs.extend((i, start, min(start + CRC_SLICE, n))
                          for start in range(0, max(n, 1), CRC_SLICE))
    self._results: list = [None] * len(self._jobs)
    self._taken = 0  # jobs handed out
    self._lock = threading.Lock()
    self._cancelled = False
    self._threads = [threading.Thread(target=self._work, daemon=True)
                     for _ in range(min(threads, len(self._jobs)))]
    for thread in self._threads:
      thread.start()

  def _work(self) -> None:
    while not self._cancelled:
      with self._lock:
        k = self._taken
        if k == len(self._jobs):
          return
        self._taken = k + 1
      chunk, start, stop = self._jobs[k]
      try:
        self._results[k] = zlib.crc32(self._views[chunk][start:stop])
      except BaseException as e:  # pylint: disable=broad-except
        self._results[k] = e  # raised by result(), in the calling thread

  def cancel(self) -> None:
    self._cancelled = True
    for thread in self._threads:
      thread.join()

  def result(self) -> list[int]:
    try:
      self._work()
    finally:
      self.cancel()  # waits for the slices other threads are on
    crcs = list(self._layout.known_crcs)
    for (chunk, start, stop), part in zip(self._jobs, self._results):
      if not isinstance(part, int):
        raise part
      crcs[chunk] = (part if start == 0
                     else combine(crcs[chunk], part, stop - start))
    return [value & 0xFFFFFFFF for value in crcs]

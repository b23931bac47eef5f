"""The operator's memory after a burst of work: what glibc keeps freed is handed back.

A burst (a thousand experiments applied at once, an operator restart with all of them live)
raises the memory the operator uses by a few hundred MiB, and it falls again once the burst is
over: but glibc's malloc keeps what was freed in its heaps, resident, for later. Measured with
``python -m bench.operator_scale --experiments 1000``: after the burst 40 MiB of malloc's memory
was in use and 250 MiB free and still resident, so the Pod's RSS stayed at its peak for good.
``MemoryTrim`` looks every ``CHECK_INTERVAL_S`` and, when glibc holds more than
``FREE_BYTES_TO_TRIM`` free, calls ``malloc_trim(0)``, which hands the free pages of every arena
back to the system (from the middle of a heap too). It cannot lower the peak itself: that is
memory in use during the burst. Not glibc (musl, macOS): nothing to do.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)

#: How often the free memory is looked at; a look is one ``mallinfo2`` call.
CHECK_INTERVAL_S = 30.0
#: Trim when glibc holds more than this free (less is reused soon enough to be worth keeping).
FREE_BYTES_TO_TRIM = 32 * 1024 * 1024


class _Mallinfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): ``fordblks`` is the free bytes in its heaps."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _glibc() -> Any:
    """glibc's functions, or None where the C library is another."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        libc.mallinfo2.argtypes, libc.mallinfo2.restype = [], _Mallinfo2
    except (OSError, AttributeError):
        return None
    return libc


class MemoryTrim:
    """Hands glibc's free memory back to the system every ``interval_s`` when there is more than
    ``threshold`` of it; ``start()``, ``close()``. ``trim()`` does it once (a test, a caller that
    knows a burst just ended)."""

    def __init__(self, interval_s: float = CHECK_INTERVAL_S, threshold: int = FREE_BYTES_TO_TRIM) -> None:
        self.interval_s, self.threshold = interval_s, threshold
        self.libc = _glibc()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def free_bytes(self) -> int | None:
        """What glibc holds free in its heaps (None: not glibc)."""
        return None if self.libc is None else self.libc.mallinfo2().fordblks

    def trim(self) -> bool:
        """``malloc_trim(0)`` if more than ``threshold`` is free; whether it was called."""
        free = self.free_bytes()
        if free is None or free <= self.threshold:
            return False
        self.libc.malloc_trim(0)
        logger.debug("handed %.0f MiB of free heap back to the system", free / 2**20)
        return True

    def start(self) -> None:
        if self.libc is None:
            return
        self._thread = threading.Thread(target=self._run, name="memory trim", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.trim()

"""A progress bar for long sweeps: redrawn in place on a terminal; in a log (a batch job's
output), a line at most every LOG_EVERY seconds and at the end, so the log stays readable."""

from __future__ import annotations

import sys
import time
from typing import TextIO

LOG_EVERY = 10.0


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total, self.done = total, 0
        self.enabled = enabled and total > 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self._logged = self.start

    def step(self, label: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        filled = 30 * self.done // self.total
        line = (f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} "
                f"{elapsed:5.0f}s elapsed, ~{eta:.0f}s left  {label}")
        if self.tty:
            self.stream.write("\r\033[K" + line)
        elif self.done == self.total or time.monotonic() - self._logged >= LOG_EVERY:
            self._logged = time.monotonic()
            self.stream.write(line + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Wipe the bar so that a table line can be printed in its place."""
        if self.enabled and self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()

"""train.log: everything the trainer says, in the run folder, whether or not a launcher already
sends the process's output there (then it is not written twice)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO


def _same_file(stream: Any, path: Path) -> bool:
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class _Tee:
    """A text stream that also appends to train.log (Python-level writes: warnings, tracebacks)."""

    def __init__(self, stream: TextIO, file: TextIO) -> None:
        self.stream, self.file = stream, file

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
        self.file.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class TrainLog:
    """Timestamped lines on stdout (rank 0) and appended to train.log."""

    def __init__(self, path: Path | None, rank: int = 0):
        self.rank = rank
        self.file: TextIO | None = None
        if path is not None:
            path.touch(exist_ok=True)
            if not _same_file(sys.stdout, path):
                self.file = open(path, "a", encoding="utf-8", buffering=1)
                if not _same_file(sys.stderr, path):
                    self._stderr = sys.stderr
                    sys.stderr = _Tee(sys.stderr, self.file)

    def __call__(self, message: str) -> None:
        if self.rank != 0:
            return
        self.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    def write(self, text: str) -> None:
        """Raw text to both places (tracebacks)."""
        if self.rank != 0:
            return
        sys.stdout.write(text)
        sys.stdout.flush()
        if self.file is not None:
            self.file.write(text)

    _stderr: TextIO | None = None

    def close(self) -> None:
        """Stop copying stderr and close train.log."""
        if self._stderr is not None:
            sys.stderr = self._stderr
            self._stderr = None
        if self.file is not None:
            self.file.close()
            self.file = None

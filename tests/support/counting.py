"""Counting a module function's calls in a test (the real function still runs)."""

from __future__ import annotations


class Counter:
    """Wraps a module's function and counts its calls."""

    def __init__(self, monkeypatch, module, name: str) -> None:
        self.n = 0
        real = getattr(module, name)

        def counted(*a, **k):
            self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(module, name, counted)

    def take(self) -> int:
        """The calls since the last take."""
        n, self.n = self.n, 0
        return n

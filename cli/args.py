"""What every subcommand's parser shares: the parser class, the `--hosts` option and the
argparse types. Its own module, so that cli/main.py can import the commands that import it."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


class Parser(argparse.ArgumentParser):
    """Options are taken only as spelled: argparse's prefix matching would read a `--host`
    typo, on a command without `--host`, as `--hosts` and replace the fleet file with it."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse exits 2 otherwise)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return n


def seconds_type(wanted: str, ok: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds for which `ok` holds; otherwise argparse
    exits 2 saying it is not a number of seconds `wanted` ("above 0", "from 0 to 3600")."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and ok(v)):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds {wanted}")
        return v

    return parse


def add_hosts_option(p: argparse.ArgumentParser) -> None:
    """Every subcommand takes --hosts FILE after its name too."""
    p.add_argument(
        "--hosts",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="fleet file (see `fleetdeck --help`)",
    )

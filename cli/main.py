"""`fleetdeck`: the command line. Each subcommand lives in `fleetdeck.cli.<name>`."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Callable

# subcommand -> module under fleetdeck.cli; each module has register(subparsers)
COMMANDS = {
    "tui": "dashboard",
    "status": "status",
    "runs": "status",
    "schedules": "schedules",
    "purge": "purge",
    "mirror": "mirror",
    "verify": "mirror",
    "launch": "launch",
    "train": "train",
    "bench": "train",
    "audit": "audit",
    "seats": "seats",
    "alerts": "alerts",
    "silence": "silence",
    "watch": "watch",
    "logs": "logs",
    "history": "history",
    "rules": "rules",
    "holders": "holders",
}


class Parser(argparse.ArgumentParser):
    """Options are taken only as spelled: argparse's prefix matching would read a `--host`
    typo, on a command without `--host`, as `--hosts` and replace the fleet file with it."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fleetdeck")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, every subcommand registered."""
    parser = Parser(
        prog="fleetdeck",
        description="Watch and act on a small fleet of GPU training hosts over SSH.",
    )
    parser.add_argument("--version", action="version", version=f"fleetdeck {_version()}")
    parser.add_argument("--hosts", metavar="FILE", help="fleet file (default: $FLEETDECK_HOSTS, "
                        "./hosts.toml, ~/.config/fleetdeck/hosts.toml, else this machine)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    seen: set[str] = set()
    for module in COMMANDS.values():
        if module in seen:
            continue
        seen.add(module)
        name = f"fleetdeck.cli.{module}"
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue  # tests/test_cli.py proves every command in COMMANDS is registered
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fleetdeck` console script; returns the exit status."""
    from fleetdeck.backend.fleet.config import ConfigError

    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    # `--hosts` is accepted after the subcommand too ("every command takes it")
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, with its own usage line
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        args = parser.parse_args([*argv, "tui"])
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"fleetdeck: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fleetdeck: interrupted", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (`fleetdeck runs | head`): stop quietly, as `cat` would; stdout
        # is pointed at /dev/null so that the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` came from, for its usage line in an error: down
    through each level's subcommands, by the name that level stored under its own `dest`."""
    found = parser
    while True:
        subs = [a for a in found._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if not name or name not in subs[0].choices:
            return found
        found = subs[0].choices[name]


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
    p.add_argument("--hosts", metavar="FILE", default=argparse.SUPPRESS,
                   help="fleet file (see `fleetdeck --help`)")


if __name__ == "__main__":
    sys.exit(main())

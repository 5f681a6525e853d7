"""`fleetdeck`: the command line. Each subcommand lives in `fleetdeck.cli.<name>`."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from fleetdeck.backend.fleet.config import ConfigError
from fleetdeck.cli import (
    alerts,
    audit,
    dashboard,
    history,
    holders,
    launch,
    logs,
    mcp,
    mirror,
    proposals,
    purge,
    rules,
    schedules,
    seats,
    silence,
    status,
    train,
    wait,
    watch,
)
from fleetdeck.cli.args import Parser, add_hosts_option

#: each command module's register(subparsers) adds its subcommands, in this order in --help
#: (status: status and runs; mirror: mirror and verify; train: train and bench)
COMMANDS = (
    dashboard,
    status,
    schedules,
    purge,
    mirror,
    launch,
    train,
    audit,
    seats,
    alerts,
    silence,
    watch,
    logs,
    wait,
    mcp,
    proposals,
    holders,
    history,
    rules,
)

__all__ = ["COMMANDS", "add_hosts_option", "build_parser", "main"]


def _version() -> str:
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
    parser.add_argument(
        "--hosts",
        metavar="FILE",
        help="fleet file (default: $FLEETDECK_HOSTS, "
        "./hosts.toml, ~/.config/fleetdeck/hosts.toml, else this machine)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for mod in COMMANDS:
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fleetdeck` console script; returns the exit status."""
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


def _command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` came from, for its usage line in an error: down
    through each level's subcommands, by the name that level stored under its own `dest`."""
    found = parser
    while True:
        subs = [a for a in found._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if not name or name not in subs[0].choices:
            return found
        found = subs[0].choices[name]


if __name__ == "__main__":
    sys.exit(main())

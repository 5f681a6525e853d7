"""`fleetdeck`: the command line. Each subcommand lives in `fleetdeck.cli.<name>`."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module
from types import ModuleType

from fleetdeck.backend.fleet.config import ConfigError
from fleetdeck.cli.args import Parser, add_hosts_option

#: each command module (`fleetdeck.cli.<module>`) with the commands its register(subparsers)
#: adds, in this order in --help. A command line that names one of them imports that module
#: only (a command's module pulls in what it runs: SSH, the monitor, the dashboard), so
#: `fleetdeck status` does not pay for `watch`; `--help`, no command or an unknown one
#: registers every module. tests/house/test_layering.py holds this table to what each module
#: registers.
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dashboard", ("tui",)),
    ("status", ("status", "runs")),
    ("schedules", ("schedules",)),
    ("purge", ("purge",)),
    ("mirror", ("mirror", "verify")),
    ("launch", ("launch",)),
    ("train", ("train", "bench")),
    ("audit", ("audit",)),
    ("seats", ("seats",)),
    ("alerts", ("alerts",)),
    ("silence", ("silence",)),
    ("watch", ("watch",)),
    ("logs", ("logs",)),
    ("wait", ("wait",)),
    ("mcp", ("mcp",)),
    ("proposals", ("proposals",)),
    ("holders", ("holders",)),
    ("history", ("history",)),
    ("rules", ("rules",)),
)

#: the top-level options that take a value (so the word after one is not the command)
_VALUED = ("--hosts",)


def command_module(name: str) -> ModuleType:
    """`fleetdeck.cli.<name>`, one of COMMANDS' modules."""
    return import_module(f"fleetdeck.cli.{name}")


def named_command(argv: list[str]) -> str | None:
    """The command `argv` names (its first word that is not an option or an option's value),
    or None when there is none; `tui` when it names none (the dashboard is the default)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word
        elif word in ("-h", "--help", "--version"):
            return None
    return "tui"


__all__ = ["COMMANDS", "add_hosts_option", "build_parser", "main"]


def _version() -> str:
    # deferred: importlib.metadata (35 ms at every start; only --version reads it)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fleetdeck")
    except PackageNotFoundError:
        return "(not installed)"


class _Version(argparse.Action):
    """--version: the installed version, looked up only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"fleetdeck {_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every subcommand registered, or with `only` (a command's name) only
    the module that registers it, when it is one of COMMANDS'."""
    parser = Parser(
        prog="fleetdeck",
        description="Watch and act on a small fleet of GPU training hosts over SSH.",
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument(
        "--hosts",
        metavar="FILE",
        help="fleet file (default: $FLEETDECK_HOSTS, "
        "./hosts.toml, ~/.config/fleetdeck/hosts.toml, else this machine)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    mods = [m for m, names in COMMANDS if only in names] or [m for m, _ in COMMANDS]
    for mod in mods:
        command_module(mod).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fleetdeck` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(named_command(argv))
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

"""The errors a helper ends with before it answers, in the one sentence and code every caller
reports them with: no sudo on the host, sudo asking for a password, a channel closed under it."""

from __future__ import annotations

import re

from fleetdeck.backend.fleet.config import HostConfig
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.channel import HelperProcess
from fleetdeck.backend.host.lib.text import shown

#: what a host's sudo says when `sudo -n` would need a password
SUDO_PASSWORD = ("a password is required", "a terminal is required")


def sudo_refused(stderr: str) -> bool:
    """True when a helper's stderr is sudo refusing to run it without a password."""
    low = stderr.lower()
    return "sudo" in low and any(s in low for s in SUDO_PASSWORD)


# what a login shell says when it finds no `sudo` to run (bash, dash, zsh, env): sudo's own
# "sudo: python3: command not found" (sudo ran, the helper's python is missing) is not one
_NO_SUDO = re.compile(
    r"(?:^|[\s:'])sudo'?: (?:command )?not found|command not found: sudo\b|"
    r"(?:^|[\s:'])sudo'?: no such file or directory",
    re.I | re.M,
)


def sudo_missing(stderr: str) -> str | None:
    """The line of a helper's stderr that says the host's shell found no sudo to run it with
    (`bash: line 1: sudo: command not found`), or None."""
    for line in stderr.splitlines():
        if _NO_SUDO.search(line):
            return line.strip()
    return None


SUDO_SENTENCE = (
    'sudo asks for a password (become = "sudo" runs helpers with sudo -n): give {user} a '
    "NOPASSWD sudoers line for the host's python3 (docs/fleet-file.md shows it)"
)


SUDO_MISSING = (
    'sudo is not installed on the host, or not on the login\'s PATH (become = "sudo" runs '
    "every helper through sudo -n): install sudo there, or remove become for this host "
    "(the host's shell said: {line})"
)


def sudo_error(host: HostConfig, stderr: str) -> HostError | None:
    """The error for a helper that sudo did not run (None otherwise): `sudo-missing` when
    the host's shell found no sudo, `sudo-password` when sudo would need a password; the one
    sentence and code every caller reports it with."""
    if host.become == "sudo":
        line = sudo_missing(stderr)
        if line is not None:
            return HostError(host.name, SUDO_MISSING.format(line=shown(line)[:200]), "sudo-missing")
    if not sudo_refused(stderr):
        return None
    return HostError(
        host.name, SUDO_SENTENCE.format(user=host.user or "the login"), "sudo-password"
    )


async def ended_error(
    host: HostConfig, helper: HelperProcess, e: BaseException, what: str
) -> HostError:
    """The error for a helper whose channel closed under it (`Channel not open for sending`,
    a broken pipe, end of file): what it said on stderr as it ended names the cause (no sudo,
    a password prompt, a traceback); the bare exception only when it said nothing."""
    err = await helper.read_stderr()
    refused = sudo_error(host, err)
    if refused is not None:
        return refused
    why = (
        err
        or (str(e) if not isinstance(e, EOFError) else "")
        or "its channel closed without a word"
    )
    return HostError(host.name, f"the {what} ended before it answered: {why}", "helper")


__all__ = [
    "SUDO_MISSING",
    "SUDO_PASSWORD",
    "SUDO_SENTENCE",
    "ended_error",
    "sudo_error",
    "sudo_missing",
    "sudo_refused",
]

"""What the schedules helper and the controller say to each other, declared once: `inspect` and
`apply`'s requests (without their `op`, which the controller's fronts add) and answers (without
`ok`). Each kind of schedule answers with the keys it has (a crontab its bytes, a loop its
family), so beyond `what` they are optional; the controller holds each answer to its record
(`backend/fleet/link/wire.py`). Python 3.8: `typing.TypedDict`, optional keys in a
`total=False` subclass."""
# Runs on the host's Python 3.8 or newer.

from typing import Any, Dict, List, Optional, TypedDict

INSPECT = "inspect"
APPLY = "apply"


class InspectRequest(TypedDict):
    """`inspect`: the schedule as it was listed."""

    schedule: Dict[str, Any]


class _ApplyRequired(TypedDict):
    schedule: Dict[str, Any]


class ApplyRequest(_ApplyRequired, total=False):
    """`apply`: the schedule as listed; for a crontab or a cron file the sha256 it was checked
    at and the backup's name and folder; for a loop the grace before SIGKILL."""

    grace: float
    sha256: str
    backup_name: str
    backup_dir: str


class _InspectedRequired(TypedDict):
    what: str


class Inspected(_InspectedRequired, total=False):
    """`inspect`'s answer: what the entry is, and what the kind has to say before anything
    changes: a file's bytes and sha256 (and the sha256 without the line), a timer's state,
    a loop's terminal and the processes stopping it ends."""

    original_b64: str
    sha256: str
    new_sha256: str
    backup_name: str
    state: Dict[str, Any]
    interactive: bool
    tty: Optional[str]
    argv: List[str]
    children: List[Dict[str, Any]]


class Applied(TypedDict, total=False):
    """`apply`'s answer: the witness (what was re-read after the change and found gone: `gone`,
    `checked`, `said`), the sentence, and what the kind adds (the host's backup and the sha256
    after, a timer's state, the signals a loop got and the processes that went with it). An
    answer without a witness is not taken as a removal: the controller says so."""

    witness: Dict[str, Any]
    message: str
    host_backup: str
    sha256_after: str
    state: Dict[str, Any]
    signals: List[str]
    children: List[Dict[str, Any]]
    interactive: bool
    tty: Optional[str]
    argv: List[str]

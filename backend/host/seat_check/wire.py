"""What the seat check helper and the controller say to each other, declared once: `check`'s
request (without its `op`, which the controller's front adds) and its answer (without `ok`).
The controller holds the answer to `Checked` (`backend/fleet/link/wire.py`) before it judges
it. Python 3.8: `typing.TypedDict`, optional keys in a `total=False` subclass."""
# Runs on the host's Python 3.8 or newer.

from typing import Any, List, Optional, TypedDict

CHECK = "check"


class _CheckRequired(TypedDict):
    port: int


class CheckRequest(_CheckRequired, total=False):
    """`check`: the seat's port on 127.0.0.1, the model (its first listed one when None), the
    deadline of each request, the completion's token budget and prompt."""

    model: Optional[str]
    timeout: float
    max_tokens: int
    prompt: str


class _CheckedRequired(TypedDict):
    port: int
    sound: bool
    signature: Optional[str]
    message: str
    model: Optional[str]
    models: List[str]
    endpoint: Optional[str]
    requests: int
    seconds: float


class Witnessed(TypedDict, total=False):
    """A sound completion's facts, as `judge.judge_completion` finds them: its content and
    finish reason, its tokens, the logprobs judged and the tokens carrying one."""

    content: Any  # what the seat sent, as it sent it: the controller keeps a string only
    finish_reason: Any
    completion_tokens: int
    logprobs: int
    tokens_with_logprobs: int


class Checked(_CheckedRequired, Witnessed, total=False):
    """`check`'s answer: sound or the signature of what is wrong, in one sentence, what was
    asked; a sound one with its witness (`Witnessed`: the completion's tokens, the logprobs
    judged)."""

"""The errors every layer of the controller may raise, kept apart so that importing one never
pulls in another module's dependencies (config parses `[alerts]`, and the alert rules raise
`ConfigError`: with the class here neither imports the other in a circle)."""

from __future__ import annotations


class ConfigError(Exception):
    """A fleet file (or RUN.toml) that cannot be used; the message names file, host and key."""


class HostError(Exception):
    """A host could not be asked: unreachable, refused, timed out, or a helper failed. `code`
    says which: timeout, unreachable, auth, key-file, host-key-unknown, host-key-changed,
    disconnected, shell-output, helper, probe..."""

    def __init__(self, host: str, message: str, code: str = "error") -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.message = message
        self.code = code


class HelperError(HostError):
    """A helper ran and answered with the host library's error shape (`{"ok": false, "error":
    {"code", "message", ...}}`), or with what is not an answer object. `code` and `message`
    are the helper's own (`bad-answer` and a sentence for a malformed answer);
    `error` is the answer's error object as it came (empty when there is none), `answer` the
    whole answer, so a caller can word the refusal its own way."""

    def __init__(
        self, host: str, message: str, code: str = "helper", answer: object = None
    ) -> None:
        super().__init__(host, message, code)
        self.answer = answer
        err = answer.get("error") if isinstance(answer, dict) else None
        self.error: dict = err if isinstance(err, dict) else {}

    @classmethod
    def of(cls, host: str, answer: object) -> HelperError:
        """The error an answer that is not `ok` stands for."""
        err = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(err, dict):
            return cls(
                host, str(err.get("message") or "failed"), str(err.get("code") or "helper"), answer
            )
        what = (
            "an object with neither ok: true nor an error object"
            if isinstance(answer, dict)
            else f"a {type(answer).__name__}"
        )
        return cls(
            host,
            f"the helper's answer is malformed ({what}, not an answer object with ok): "
            f"{str(answer)[:200]}",
            "bad-answer",
            answer,
        )


def answer_or_raise(host: str, answer: object) -> dict:
    """`answer` when it is a dict that says `"ok": true`; HelperError otherwise."""
    if isinstance(answer, dict) and answer.get("ok") is True:
        return answer
    raise HelperError.of(host, answer)

"""What a seat's answer means, for the seat check: its HTTP status, its JSON, and a completion
judged for each failure signature (`main` lists them), or its facts and the witness sentence
when it is sound."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import json
import math

from fleetdeck.backend.host.lib import jsondepth

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, List, Optional, Tuple

    from fleetdeck.backend.host.seat_check.wire import Witnessed

UNSERIALISABLE = "out of range float values are not json compliant"
#: a log-probability is at most 0; rounding may leave a hair above it
LOGPROB_CEILING = 1e-4
#: and no softmax over a real vocabulary puts a token this low
LOGPROB_FLOOR = -1e4


class Bad(Exception):
    """A finding: the signature and one sentence."""

    def __init__(self, signature: str, message: str) -> None:
        Exception.__init__(self, message)
        self.signature = signature
        self.message = message


def _nonfinite(name: str) -> float:
    # json.loads calls this for the NaN / Infinity / -Infinity literals Python would accept
    return float(name)


def text_of(payload: bytes, limit: int = 300) -> str:
    """The start of an answer's body as text, for a sentence."""
    return payload.decode("utf-8", "replace").strip()[:limit]


def judge_status(url: str, status: int, payload: bytes) -> None:
    """Bad for an HTTP error status: `logprob-unserialisable` or `server-error`."""
    if status < 400:
        return
    body = text_of(payload)
    if UNSERIALISABLE in body.lower():
        raise Bad(
            "logprob-unserialisable",
            "the server cannot serialise its logprobs (HTTP %d: %s)" % (status, body),
        )
    raise Bad("server-error", "%s answered HTTP %d: %s" % (url, status, body or "(empty body)"))


def answer_json(url: str, payload: bytes) -> Any:
    """An answer's JSON, refused past `jsondepth.MAX_DEPTH`; Bad when it is no JSON."""
    try:
        jsondepth.check(payload, what="the answer from %s" % url)
    except jsondepth.TooDeep as e:
        raise Bad(jsondepth.CODE, str(e)) from None
    try:
        return json.loads(payload.decode("utf-8", "replace"), parse_constant=_nonfinite)
    except ValueError:
        raise Bad(
            "server-error", "%s did not answer JSON: %s" % (url, text_of(payload, 120))
        ) from None


def kind_of(v: object) -> str:
    """A JSON value's kind in words, for a `bad-answer` sentence."""
    if isinstance(v, bool):
        return "true or false"
    if isinstance(v, (int, float)):
        return "a number (%r)" % v
    if isinstance(v, str):
        return "a string (%s)" % json.dumps(v[:40])
    return {dict: "an object", list: "a list", type(None): "null"}.get(type(v), type(v).__name__)


def _shape(ok: bool, field: str, v: object, want: str) -> None:
    """`Bad("bad-answer")` naming `field`, what it holds and what it should be, unless `ok`."""
    if not ok:
        raise Bad("bad-answer", "the completion's %s is %s, not %s" % (field, kind_of(v), want))


def _logprobs(choice: Dict[str, Any]) -> Optional[Tuple[List[Any], int]]:
    """(every logprob number in a chat or completions choice, with None for a missing one, and
    how many tokens carry one), or None when the choice has no logprobs; `bad-answer` when they
    are there in another shape."""
    lp = choice.get("logprobs")
    if lp is None:
        return None
    _shape(isinstance(lp, dict), "logprobs", lp, "an object")
    out: List[Any] = []
    if lp.get("content") is not None:  # chat: [{"token", "logprob", "top_logprobs"}]
        items = lp["content"]
        _shape(isinstance(items, list), "logprobs.content", items, "a list")
        for i, item in enumerate(items):
            _shape(isinstance(item, dict), "logprobs.content[%d]" % i, item, "an object")
            out.append(item.get("logprob"))
            tops = item.get("top_logprobs")
            _shape(
                tops is None or isinstance(tops, list),
                "logprobs.content[%d].top_logprobs" % i,
                tops,
                "a list",
            )
            for j, top in enumerate(tops or ()):
                _shape(
                    isinstance(top, dict),
                    "logprobs.content[%d].top_logprobs[%d]" % (i, j),
                    top,
                    "an object",
                )
                out.append(top.get("logprob"))
        return out, len(items)
    if lp.get("token_logprobs") is not None:  # completions: parallel lists
        tokens = lp["token_logprobs"]
        _shape(isinstance(tokens, list), "logprobs.token_logprobs", tokens, "a list")
        out.extend(tokens)
        tops = lp.get("top_logprobs")
        _shape(tops is None or isinstance(tops, list), "logprobs.top_logprobs", tops, "a list")
        for j, top in enumerate(tops or ()):
            # null where a token has no alternatives (an echoed first prompt token)
            _shape(
                top is None or isinstance(top, dict),
                "logprobs.top_logprobs[%d]" % j,
                top,
                "an object",
            )
            out.extend((top or {}).values())
        return out, len(tokens)
    return None


def judge_completion(doc: Any, max_tokens: int) -> Witnessed:
    """Raise Bad when a completion answer carries a failure signature; the facts when sound,
    its witness among them (`completion_tokens`, `logprobs`, `tokens_with_logprobs`)."""
    if not isinstance(doc, dict):
        raise Bad("bad-answer", "the completion answer is %s, not a JSON object" % kind_of(doc))
    if "choices" not in doc:
        raise Bad(
            "bad-answer",
            "the completion answer has no choices (its fields: %s)"
            % (", ".join(sorted(str(k) for k in doc)[:10]) or "none"),
        )
    choices = doc["choices"]
    _shape(isinstance(choices, list), "choices", choices, "a list")
    if not choices:
        raise Bad("empty-completion", "the completion shows nothing to judge: it has no choices")
    choice = choices[0]
    _shape(isinstance(choice, dict), "choices[0]", choice, "an object")
    msg = choice.get("message")
    _shape(msg is None or isinstance(msg, dict), "choices[0].message", msg, "an object")
    content = msg.get("content") if isinstance(msg, dict) else choice.get("text")
    _shape(content is None or isinstance(content, (str, list)), "content", content, "text")
    finish = choice.get("finish_reason")
    usage = doc.get("usage")
    _shape(usage is None or isinstance(usage, dict), "usage", usage, "an object")
    tokens = (usage or {}).get("completion_tokens")
    _shape(
        tokens is None
        or (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0),
        "usage.completion_tokens",
        tokens,
        "a count",
    )
    found = _logprobs(choice)
    lps = found[0] if found is not None else None
    if lps is not None:
        bad = [
            v
            for v in lps
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)
        ]
        if bad:
            raise Bad(
                "logprob-nonfinite",
                "%d of %d logprobs are not finite numbers (first: %r)"
                % (len(bad), len(lps), bad[0]),
            )
        odd = [v for v in lps if v > LOGPROB_CEILING or v < LOGPROB_FLOOR]
        if odd:
            raise Bad(
                "logprob-out-of-range",
                "%d of %d logprobs are not log-probabilities "
                "(positive, or below %g; first: %r)" % (len(odd), len(lps), LOGPROB_FLOOR, odd[0]),
            )
    empty = (
        content is None
        or (isinstance(content, (str, list)) and not content)
        or (isinstance(content, str) and not content.strip())
    )
    if finish == "length" and empty:
        raise Bad(
            "empty-at-length",
            "the completion used its full budget (%s tokens, "
            "finish_reason=length) but its content is %s"
            % (
                tokens if tokens is not None else max_tokens,
                "null" if content is None else "empty",
            ),
        )
    if found is None:
        raise Bad("logprobs-missing", "the server answered without the logprobs it was asked for")
    with_lp = found[1]
    if tokens is None:  # no usage: the tokens are those that carry a logprob
        tokens = with_lp
    if empty or tokens == 0 or not lps or with_lp == 0:
        what = (
            "content is %s" % ("null" if content is None else "empty")
            if empty
            else "it counts 0 completion tokens"
            if tokens == 0
            else "it carries no logprob for any token"
        )
        raise Bad("empty-completion", "the completion shows nothing to judge: %s" % what)
    if isinstance(content, list):
        content = json.dumps(content)[:300]
    return {
        "content": content,
        "finish_reason": finish,
        "completion_tokens": tokens,
        "logprobs": len(lps),
        "tokens_with_logprobs": with_lp,
    }


def witness_sentence(model: str, port: int, facts: Witnessed) -> str:
    """The sentence of a sound verdict: what it got back and what it judged."""
    return (
        "%s on port %d answered %d completion tokens (%s); all %d logprobs of its %d tokens "
        "are finite log-probabilities (at most 0, above %g)"
        % (
            model,
            port,
            facts["completion_tokens"],
            json.dumps(facts["content"])[:60],
            facts["logprobs"],
            facts["tokens_with_logprobs"],
            LOGPROB_FLOOR,
        )
    )

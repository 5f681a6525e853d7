"""Host side of `seats check`: one small completion against a serving seat on 127.0.0.1.

Runs on the host (stdlib + host library, Python 3.8+) through `HostLink.run_helper`, so the
seat's port is never opened to the controller. Request: `{"op": "check", "port": 8000,
"model": null, "timeout": 20, "max_tokens": 8, "prompt": "..."}` (declared in `wire`, with
the answer). It lists the models (GET /v1/models), then asks for one short chat completion
with logprobs (falling back to /v1/completions only when the chat route does not exist). The
answer says `sound` and, when not, the `signature` of what is wrong:

- `unreachable`: nothing answers on the port;
- `timeout`: the whole answer (headers and body) did not arrive within the timeout, however
  steadily it dripped: each request has one deadline, not a per-read one;
- `answer-too-large`: the body grew past ANSWER_LIMIT (1 MiB, in `request`); the helper reads at most that
  much, so a seat streaming an endless body never grows the helper's memory;
- `server-error`: an HTTP error status or a body that is not JSON;
- `logprob-unserialisable`: the server could not serialise a logprob (the NaN seat's
  "Out of range float values are not JSON compliant" answer);
- `logprob-nonfinite`: a logprob is NaN or infinite (or null) in the body;
- `logprob-out-of-range`: a logprob is positive (a log-probability is at most 0) or below
  LOGPROB_FLOOR (in `judge`; -1e4: no softmax over a real vocabulary goes there), e.g. 1e300;
- `logprobs-missing`: the server ignored the logprobs request, so soundness cannot be shown;
- `empty-at-length`: the content is empty or null although the full token budget was used
  (`finish_reason == "length"`), the signature of a seat generating garbage;
- `empty-completion`: no choices, no content, zero completion tokens, or no logprob for any
  token: an answer that shows nothing cannot show the seat is sound;
- `bad-answer`: JSON of another shape than an OpenAI-compatible answer (choices that are not a
  list, a choice that is not an object, a token count that is not a count...): the sentence
  names the field and what it held;
- `answer-too-deep`: JSON nested more than `jsondepth.MAX_DEPTH` (64) levels, refused before
  parsing (the parser would recurse once per level).

A sound verdict names its witness: the completion tokens the seat sent back (its `usage`
count, else the tokens that carry a logprob), how many logprobs were judged, and that every
one of them was a finite log-probability. The answer carries them as `completion_tokens`,
`logprobs` and `tokens_with_logprobs`; with any of them zero the verdict is not sound.
"""
# Runs on the host's Python 3.8 or newer (socket.timeout is not TimeoutError before 3.10).
# ruff: noqa: UP031, UP041

from __future__ import annotations

import sys
import time

from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.seat_check.judge import (
    Bad,
    answer_json,
    judge_completion,
    judge_status,
    kind_of,
    text_of,
    witness_sentence,
)
from fleetdeck.backend.host.seat_check.request import ask_seat
from fleetdeck.backend.host.seat_check.wire import CHECK, Checked, CheckRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Optional, Tuple

PROMPT = "The capital of France is"


def check(req: CheckRequest) -> Checked:
    """Run the seat check; always an answer with `sound`, never an exception for a bad seat."""
    port = req.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise Refused("bad-request", "port must be an integer between 1 and 65535")
    timeout = float(req.get("timeout") or 20)
    max_tokens = int(req.get("max_tokens") or 8)
    base = "http://127.0.0.1:%d" % port
    if not 0 < timeout <= 3600:
        raise Refused("bad-request", "timeout must be between 0 and 3600 seconds")
    out: Checked = {
        "port": port,
        "sound": False,
        "signature": None,
        "message": "",
        "model": None,
        "models": [],
        "endpoint": None,
        "requests": 0,
        "seconds": 0.0,
    }
    t0 = time.monotonic()

    def ask(
        path: str, body: Optional[Any]
    ) -> Tuple[int, bytes]:  # counted when sent, so a late or huge answer still says what was asked
        out["requests"] += 1
        if body is not None:
            out["endpoint"] = path
        return ask_seat(port, path, body, timeout)

    try:
        status, payload = ask("/v1/models", None)
        judge_status(base + "/v1/models", status, payload)
        listing = answer_json(base + "/v1/models", payload)
        data = listing.get("data") if isinstance(listing, dict) else listing
        if not isinstance(data, list):
            raise Bad(
                "bad-answer",
                "%s/v1/models answered %s where a list of models belongs" % (base, kind_of(data)),
            )
        ids = [m.get("id") for m in data if isinstance(m, dict)]
        out["models"] = [i for i in ids if isinstance(i, str)]
        model = req.get("model") or (out["models"][0] if out["models"] else None)
        if model is None:
            raise Bad("server-error", "%s/v1/models lists no model" % base)
        out["model"] = model
        chat = {
            "model": model,
            "messages": [{"role": "user", "content": req.get("prompt") or PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 1,
        }
        url = base + "/v1/chat/completions"
        status, payload = ask("/v1/chat/completions", chat)
        if status == 404:  # no chat route (no chat template): the plain completions route
            url = base + "/v1/completions"
            plain = {
                "model": model,
                "prompt": req.get("prompt") or PROMPT,
                "max_tokens": max_tokens,
                "temperature": 0,
                "logprobs": 1,
            }
            status, payload = ask("/v1/completions", plain)
        judge_status(url, status, payload)
        doc = answer_json(url, payload)
        try:
            facts = judge_completion(doc, max_tokens)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            # a shape the checks above did not foresee: still the seat's answer, named as such
            raise Bad(
                "bad-answer",
                "the answer from %s has a shape the check cannot read (%s: %s)"
                % (url, type(e).__name__, text_of(str(e).encode(), 120)),
            ) from None
        out.update(facts)
        out["sound"] = True
        out["message"] = witness_sentence(model, port, facts)
    except Bad as e:
        out["signature"] = e.signature
        out["message"] = e.message
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


if __name__ == "__main__":
    sys.exit(serve({CHECK: check}))

"""Host side of `seats check`: one small completion against a serving seat on 127.0.0.1.

Runs on the host (stdlib + host library, Python 3.8+) through `HostLink.run_helper`, so the
seat's port is never opened to the controller. Request: `{"op": "check", "port": 8000,
"model": null, "timeout": 20, "max_tokens": 8, "prompt": "..."}`. It lists the models
(GET /v1/models), then asks for one short chat completion with logprobs (falling back to
/v1/completions only when the chat route does not exist). The answer says `sound` and, when
not, the `signature` of what is wrong:

- `unreachable`: nothing answers on the port;
- `timeout`: the whole answer (headers and body) did not arrive within the timeout, however
  steadily it dripped: each request has one deadline, not a per-read one;
- `answer-too-large`: the body grew past ANSWER_LIMIT (1 MiB); the helper reads at most that
  much, so a seat streaming an endless body never grows the helper's memory;
- `server-error`: an HTTP error status or a body that is not JSON;
- `logprob-unserialisable`: the server could not serialise a logprob (the NaN seat's
  "Out of range float values are not JSON compliant" answer);
- `logprob-nonfinite`: a logprob is NaN or infinite (or null) in the body;
- `logprob-out-of-range`: a logprob is positive (a log-probability is at most 0) or below
  LOGPROB_FLOOR (-1e4: no softmax over a real vocabulary goes there), e.g. 1e300;
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

import http.client
import json
import math
import socket
import sys
import threading
import time

from fleetdeck.backend.host.lib import jsondepth
from fleetdeck.backend.host.lib.serve import Refused, serve

PROMPT = "The capital of France is"
UNSERIALISABLE = "out of range float values are not json compliant"
#: the most bytes of one answer the helper reads: a listing of models or an 8-token completion
#: with its logprobs is a few KiB
ANSWER_LIMIT = 1 << 20
#: a log-probability is at most 0; rounding may leave a hair above it
LOGPROB_CEILING = 1e-4
#: and no softmax over a real vocabulary puts a token this low
LOGPROB_FLOOR = -1e4


class _Bad(Exception):
    """A finding: the signature and one sentence."""

    def __init__(self, signature, message):
        Exception.__init__(self, message)
        self.signature = signature
        self.message = message


def _nonfinite(name):
    # json.loads calls this for the NaN / Infinity / -Infinity literals Python would accept
    return float(name)


def _request(port, path, body, timeout, limit=ANSWER_LIMIT):
    """(status, body bytes) of one request to 127.0.0.1:`port`, the whole answer within
    `timeout` seconds and at most `limit` bytes; _Bad for no answer, a late or a huge one."""
    url = "http://127.0.0.1:%d%s" % (port, path)
    data = None if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + timeout
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    late = []

    def cut():  # the one deadline: whatever the helper is waiting for, it stops waiting
        late.append(True)
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):
            pass

    timer = None
    try:
        try:
            conn.connect()
        except ConnectionRefusedError:
            raise _Bad("unreachable", "nothing listens on %s (connection refused)" % url) from None
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
        timer.daemon = True
        timer.start()
        conn.request(
            "GET" if body is None else "POST",
            path,
            body=data,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        r = conn.getresponse()
        declared = r.getheader("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > limit:
            raise _Bad(
                "answer-too-large",
                "%s announced a %s-byte answer; the check reads at most %d"
                % (url, declared.strip(), limit),
            )
        chunks, total = [], 0
        while True:
            b = r.read1(65536)
            if not b:
                break
            total += len(b)
            if total > limit:
                raise _Bad(
                    "answer-too-large",
                    "%s sent more than %d bytes; the check stopped reading" % (url, limit),
                )
            chunks.append(b)
        if late or time.monotonic() > deadline:
            raise _Bad(
                "timeout", "the answer from %s did not arrive whole within %gs" % (url, timeout)
            )
        return r.status, b"".join(chunks)
    except _Bad:
        raise
    except (socket.timeout, TimeoutError):
        raise _Bad("timeout", "no whole answer from %s within %gs" % (url, timeout)) from None
    except (http.client.HTTPException, ConnectionError, OSError) as e:
        if late or time.monotonic() >= deadline:
            raise _Bad(
                "timeout", "the answer from %s did not arrive whole within %gs" % (url, timeout)
            ) from None
        raise _Bad("unreachable", "cannot reach %s: %s" % (url, e)) from None
    finally:
        if timer is not None:
            timer.cancel()
        conn.close()


def _text(payload, limit=300):
    return payload.decode("utf-8", "replace").strip()[:limit]


def _judge_status(url, status, payload):
    if status < 400:
        return
    body = _text(payload)
    if UNSERIALISABLE in body.lower():
        raise _Bad(
            "logprob-unserialisable",
            "the server cannot serialise its logprobs (HTTP %d: %s)" % (status, body),
        )
    raise _Bad("server-error", "%s answered HTTP %d: %s" % (url, status, body or "(empty body)"))


def _json(url, payload):
    try:
        jsondepth.check(payload, what="the answer from %s" % url)
    except jsondepth.TooDeep as e:
        raise _Bad(jsondepth.CODE, str(e)) from None
    try:
        return json.loads(payload.decode("utf-8", "replace"), parse_constant=_nonfinite)
    except ValueError:
        raise _Bad(
            "server-error", "%s did not answer JSON: %s" % (url, _text(payload, 120))
        ) from None


def _kind(v):
    """A JSON value's kind in words, for a `bad-answer` sentence."""
    if isinstance(v, bool):
        return "true or false"
    if isinstance(v, (int, float)):
        return "a number (%r)" % v
    if isinstance(v, str):
        return "a string (%s)" % json.dumps(v[:40])
    return {dict: "an object", list: "a list", type(None): "null"}.get(type(v), type(v).__name__)


def _shape(ok, field, v, want):
    """`_Bad("bad-answer")` naming `field`, what it holds and what it should be, unless `ok`."""
    if not ok:
        raise _Bad("bad-answer", "the completion's %s is %s, not %s" % (field, _kind(v), want))


def _logprobs(choice):
    """(every logprob number in a chat or completions choice, with None for a missing one, and
    how many tokens carry one), or None when the choice has no logprobs; `bad-answer` when they
    are there in another shape."""
    lp = choice.get("logprobs")
    if lp is None:
        return None
    _shape(isinstance(lp, dict), "logprobs", lp, "an object")
    out = []
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


def judge_completion(doc, max_tokens):
    """Raise _Bad when a completion answer carries a failure signature; the facts when sound,
    its witness among them (`completion_tokens`, `logprobs`, `tokens_with_logprobs`)."""
    if not isinstance(doc, dict):
        raise _Bad("bad-answer", "the completion answer is %s, not a JSON object" % _kind(doc))
    if "choices" not in doc:
        raise _Bad(
            "bad-answer",
            "the completion answer has no choices (its fields: %s)"
            % (", ".join(sorted(str(k) for k in doc)[:10]) or "none"),
        )
    choices = doc["choices"]
    _shape(isinstance(choices, list), "choices", choices, "a list")
    if not choices:
        raise _Bad("empty-completion", "the completion shows nothing to judge: it has no choices")
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
            raise _Bad(
                "logprob-nonfinite",
                "%d of %d logprobs are not finite numbers (first: %r)"
                % (len(bad), len(lps), bad[0]),
            )
        odd = [v for v in lps if v > LOGPROB_CEILING or v < LOGPROB_FLOOR]
        if odd:
            raise _Bad(
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
        raise _Bad(
            "empty-at-length",
            "the completion used its full budget (%s tokens, "
            "finish_reason=length) but its content is %s"
            % (
                tokens if tokens is not None else max_tokens,
                "null" if content is None else "empty",
            ),
        )
    if found is None:
        raise _Bad("logprobs-missing", "the server answered without the logprobs it was asked for")
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
        raise _Bad("empty-completion", "the completion shows nothing to judge: %s" % what)
    if isinstance(content, list):
        content = json.dumps(content)[:300]
    return {
        "content": content,
        "finish_reason": finish,
        "completion_tokens": tokens,
        "logprobs": len(lps),
        "tokens_with_logprobs": with_lp,
    }


def witness_sentence(model, port, facts):
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


def check(req):
    """Run the seat check; always an answer with `sound`, never an exception for a bad seat."""
    port = req.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise Refused("bad-request", "port must be an integer between 1 and 65535")
    timeout = float(req.get("timeout") or 20)
    max_tokens = int(req.get("max_tokens") or 8)
    base = "http://127.0.0.1:%d" % port
    if not 0 < timeout <= 3600:
        raise Refused("bad-request", "timeout must be between 0 and 3600 seconds")
    out = {
        "port": port,
        "sound": False,
        "signature": None,
        "message": "",
        "model": None,
        "models": [],
        "endpoint": None,
        "requests": 0,
    }
    t0 = time.monotonic()

    def ask(path, body):  # counted when sent, so a late or huge answer still says what was asked
        out["requests"] += 1
        if body is not None:
            out["endpoint"] = path
        return _request(port, path, body, timeout)

    try:
        status, payload = ask("/v1/models", None)
        _judge_status(base + "/v1/models", status, payload)
        listing = _json(base + "/v1/models", payload)
        data = listing.get("data") if isinstance(listing, dict) else listing
        if not isinstance(data, list):
            raise _Bad(
                "bad-answer",
                "%s/v1/models answered %s where a list of models belongs" % (base, _kind(data)),
            )
        ids = [m.get("id") for m in data if isinstance(m, dict)]
        out["models"] = [i for i in ids if isinstance(i, str)]
        model = req.get("model") or (out["models"][0] if out["models"] else None)
        if model is None:
            raise _Bad("server-error", "%s/v1/models lists no model" % base)
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
        _judge_status(url, status, payload)
        doc = _json(url, payload)
        try:
            facts = judge_completion(doc, max_tokens)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            # a shape the checks above did not foresee: still the seat's answer, named as such
            raise _Bad(
                "bad-answer",
                "the answer from %s has a shape the check cannot read (%s: %s)"
                % (url, type(e).__name__, _text(str(e).encode(), 120)),
            ) from None
        out.update(facts)
        out["sound"] = True
        out["message"] = witness_sentence(model, port, facts)
    except _Bad as e:
        out["signature"] = e.signature
        out["message"] = e.message
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


if __name__ == "__main__":
    sys.exit(serve({"check": check}))

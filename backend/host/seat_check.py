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
- `empty-completion`: no content, zero completion tokens, or no logprob for any token: an
  answer that shows nothing cannot show the seat is sound.
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

    def cut():   # the one deadline: whatever the helper is waiting for, it stops waiting
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
        conn.request("GET" if body is None else "POST", path, body=data,
                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        r = conn.getresponse()
        declared = r.getheader("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > limit:
            raise _Bad("answer-too-large", "%s announced a %s-byte answer; the check reads at most %d"
                       % (url, declared.strip(), limit))
        chunks, total = [], 0
        while True:
            b = r.read1(65536)
            if not b:
                break
            total += len(b)
            if total > limit:
                raise _Bad("answer-too-large", "%s sent more than %d bytes; the check stopped reading"
                           % (url, limit))
            chunks.append(b)
        if late or time.monotonic() > deadline:
            raise _Bad("timeout", "the answer from %s did not arrive whole within %gs" % (url, timeout))
        return r.status, b"".join(chunks)
    except _Bad:
        raise
    except (socket.timeout, TimeoutError):
        raise _Bad("timeout", "no whole answer from %s within %gs" % (url, timeout)) from None
    except (http.client.HTTPException, ConnectionError, OSError) as e:
        if late or time.monotonic() >= deadline:
            raise _Bad("timeout", "the answer from %s did not arrive whole within %gs" % (url, timeout)) from None
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
        raise _Bad("logprob-unserialisable",
                   "the server cannot serialise its logprobs (HTTP %d: %s)" % (status, body))
    raise _Bad("server-error", "%s answered HTTP %d: %s" % (url, status, body or "(empty body)"))


def _json(url, payload):
    try:
        return json.loads(payload.decode("utf-8", "replace"), parse_constant=_nonfinite)
    except ValueError:
        raise _Bad("server-error", "%s did not answer JSON: %s" % (url, _text(payload, 120))) from None


def _logprobs(choice):
    """Every logprob number in a chat or completions choice, with None for a missing one."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    out = []
    if isinstance(lp.get("content"), list):       # chat: [{"token", "logprob", "top_logprobs"}]
        for item in lp["content"]:
            if not isinstance(item, dict):
                continue
            out.append(item.get("logprob"))
            for top in item.get("top_logprobs") or ():
                if isinstance(top, dict):
                    out.append(top.get("logprob"))
    elif isinstance(lp.get("token_logprobs"), list):   # completions: parallel lists
        out.extend(lp["token_logprobs"])
        for top in lp.get("top_logprobs") or ():
            if isinstance(top, dict):
                out.extend(top.values())
    else:
        return None
    return out


def judge_completion(doc, max_tokens):
    """Raise _Bad when a completion answer carries a failure signature; the facts when sound."""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise _Bad("server-error", "the completion has no choices")
    choice = choices[0]
    msg = choice.get("message")
    content = msg.get("content") if isinstance(msg, dict) else choice.get("text")
    finish = choice.get("finish_reason")
    usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
    tokens = usage.get("completion_tokens")
    lps = _logprobs(choice)
    if lps is not None:
        bad = [v for v in lps if not isinstance(v, (int, float)) or isinstance(v, bool)
               or not math.isfinite(v)]
        if bad:
            raise _Bad("logprob-nonfinite", "%d of %d logprobs are not finite numbers (first: %r)"
                       % (len(bad), len(lps), bad[0]))
        odd = [v for v in lps if v > LOGPROB_CEILING or v < LOGPROB_FLOOR]
        if odd:
            raise _Bad("logprob-out-of-range", "%d of %d logprobs are not log-probabilities "
                       "(positive, or below %g; first: %r)" % (len(odd), len(lps), LOGPROB_FLOOR, odd[0]))
    empty = content is None or (isinstance(content, (str, list)) and not content) or (
        isinstance(content, str) and not content.strip())
    if finish == "length" and empty:
        raise _Bad("empty-at-length", "the completion used its full budget (%s tokens, "
                   "finish_reason=length) but its content is %s"
                   % (tokens if tokens is not None else max_tokens,
                      "null" if content is None else "empty"))
    if lps is None:
        raise _Bad("logprobs-missing", "the server answered without the logprobs it was asked for")
    if empty or tokens == 0 or not lps:
        what = ("content is %s" % ("null" if content is None else "empty") if empty else
                "it counts 0 completion tokens" if tokens == 0 else "it carries no logprob for any token")
        raise _Bad("empty-completion", "the completion shows nothing to judge: %s" % what)
    if isinstance(content, list):
        content = json.dumps(content)[:300]
    return {"content": content, "finish_reason": finish, "completion_tokens": tokens,
            "logprobs": len(lps)}


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
    out = {"port": port, "sound": False, "signature": None, "message": "", "model": None,
           "models": [], "endpoint": None, "requests": 0}
    t0 = time.monotonic()

    def ask(path, body):   # counted when sent, so a late or huge answer still says what was asked
        out["requests"] += 1
        if body is not None:
            out["endpoint"] = path
        return _request(port, path, body, timeout)

    try:
        status, payload = ask("/v1/models", None)
        _judge_status(base + "/v1/models", status, payload)
        listing = _json(base + "/v1/models", payload)
        ids = [m.get("id") for m in (listing.get("data") or []) if isinstance(m, dict)] \
            if isinstance(listing, dict) else []
        out["models"] = [i for i in ids if isinstance(i, str)]
        model = req.get("model") or (out["models"][0] if out["models"] else None)
        if model is None:
            raise _Bad("server-error", "%s/v1/models lists no model" % base)
        out["model"] = model
        chat = {"model": model, "messages": [{"role": "user", "content": req.get("prompt") or PROMPT}],
                "max_tokens": max_tokens, "temperature": 0, "logprobs": True, "top_logprobs": 1}
        url = base + "/v1/chat/completions"
        status, payload = ask("/v1/chat/completions", chat)
        if status == 404:   # no chat route (no chat template): the plain completions route
            url = base + "/v1/completions"
            plain = {"model": model, "prompt": req.get("prompt") or PROMPT, "max_tokens": max_tokens,
                     "temperature": 0, "logprobs": 1}
            status, payload = ask("/v1/completions", plain)
        _judge_status(url, status, payload)
        out.update(judge_completion(_json(url, payload), max_tokens))
        out["sound"] = True
        out["message"] = "%s on port %d answered %d tokens with finite logprobs" % (
            model, port, out.get("completion_tokens") or 0)
    except _Bad as e:
        out["signature"] = e.signature
        out["message"] = e.message
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


if __name__ == "__main__":
    sys.exit(serve({"check": check}))

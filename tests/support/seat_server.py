"""A small OpenAI-compatible server for tests: `random:tiny` through transformers, on loopback.

    python tests/support/seat_server.py --port 0 [--nan] [--lenient-json] [--ignore-logprobs]
        [--empty] [--logprob VALUE] [--drip SECONDS] [--endless] [--shape SHAPE]

It prints `listening on PORT` once it serves. Routes: GET /v1/models, POST /v1/chat/completions
and /v1/completions (greedy, `max_tokens`, optional logprobs). Every token comes from a real
forward pass of the model; `--nan` sets one weight (the final norm) to NaN before serving, so
NaN logits come out of that forward pass the way a broken quantised router makes them.

Serialisation follows the servers it stands in for: JSON without NaN, so a non-finite logprob
makes the server answer HTTP 500 "Out of range float values are not JSON compliant" (what
the operator saw from vLLM). `--lenient-json` writes NaN literals instead; `--ignore-logprobs`
answers without logprobs, as a server that does not support them. Like a detokenizer that
drops what it cannot print, the content is `null` when no printable text came out.

Broken seats for the checks that judge: `--empty` answers an empty completion (content "",
zero tokens, `logprobs.content: []`); `--logprob VALUE` writes VALUE for every logprob (1e300,
0.5); `--drip SECONDS` sends the completion's body one byte every SECONDS (each read of the
client gets a byte in time, the whole answer never does); `--endless` streams a completion body
that never ends, as fast as the client takes it, and counts what it sent in `--sent-file`.

`--shape` bends the completion's JSON the way a broken proxy or server does: `choices-object`
(choices an object keyed by name instead of a list), `deep` (the content an array nested
100,000 levels deep), `no-choices` (an empty list of choices, zero tokens), `no-usage` (no
`usage` field: the token count is only in the logprobs).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_ID = "random:tiny"


class Model:
    """The tiny random model and the byte tokenizer, greedy generation with logprobs."""

    def __init__(self, nan: bool) -> None:
        import torch

        from fleetdeck.backend.train.corpus import ByteTokenizer
        from fleetdeck.backend.train.models import build_model

        torch.set_num_threads(1)
        self.torch = torch
        self.tok = ByteTokenizer()
        self.model = build_model(MODEL_ID, torch.float32, torch.device("cpu"), "sdpa", 4919)
        self.model.eval()
        if nan:
            with torch.no_grad():
                self.model.model.norm.weight[0] = float("nan")
        self.lock = threading.Lock()

    def generate(
        self, prompt: str, max_tokens: int
    ) -> tuple[list[int], list[float], list[dict], str]:
        """(tokens, their logprobs, top-1 alternatives, finish_reason)."""
        torch = self.torch
        ids = self.tok.encode(prompt)[-512:] or [self.tok.eos_id]
        out, lps, tops = [], [], []
        finish = "length"
        with self.lock, torch.no_grad():
            for _ in range(max_tokens):
                logits = self.model(torch.tensor([ids + out])).logits[0, -1]
                logp = torch.log_softmax(logits.float(), dim=-1)
                nxt = int(torch.argmax(logp))
                if nxt == self.tok.eos_id:
                    finish = "stop"
                    break
                out.append(nxt)
                lps.append(float(logp[nxt]))
                tops.append({self.text([nxt]): float(logp[nxt])})
        return out, lps, tops, finish

    def text(self, tokens: list[int]) -> str:
        raw = bytes(t for t in tokens if t < 256).decode("utf-8", "ignore")
        return "".join(c for c in raw if c.isprintable() or c in "\n\t")


class Handler(BaseHTTPRequestHandler):
    """The OpenAI routes a seat check uses."""

    server_version = "seat-server/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, doc: object) -> None:
        try:
            body = json.dumps(doc, allow_nan=self.server.lenient).encode()  # type: ignore[attr-defined]
        except ValueError as e:
            status, body = (
                500,
                json.dumps(
                    {
                        "object": "error",
                        "message": str(e) + ": nan",
                        "type": "InternalServerError",
                        "code": 500,
                    }
                ).encode(),
            )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": MODEL_ID, "object": "model", "owned_by": "tests"}],
                },
            )
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def _send_raw(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for i in range(len(body)):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(self.server.drip)  # type: ignore[attr-defined]
        except OSError:
            pass  # the client gave up

    def _endless(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sent = 0
        block = b'{"choices": [' + b" " * 65523
        try:
            while True:
                self.wfile.write(block)
                sent += len(block)
                if self.server.sent_file:  # type: ignore[attr-defined]
                    with open(self.server.sent_file, "w") as f:  # type: ignore[attr-defined]
                        f.write(str(sent))
                block = b" " * 65536
        except OSError:
            pass  # the client stopped reading and closed

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        if req.get("model") != MODEL_ID:
            self._send(404, {"error": {"message": f"model {req.get('model')!r} does not exist"}})
            return
        if self.server.endless:  # type: ignore[attr-defined]
            self._endless()
            return
        if self.server.delay:  # type: ignore[attr-defined]
            time.sleep(self.server.delay)  # type: ignore[attr-defined]
        model: Model = self.server.model  # type: ignore[attr-defined]
        prompt = (
            "\n".join(str(m.get("content", "")) for m in req.get("messages") or ())
            if chat
            else str(req.get("prompt", ""))
        )
        tokens, lps, tops, finish = model.generate(prompt, int(req.get("max_tokens") or 16))
        if self.server.logprob is not None:  # type: ignore[attr-defined]
            lps = [self.server.logprob] * len(lps)  # type: ignore[attr-defined]
            tops = [{k: self.server.logprob for k in top} for top in tops]  # type: ignore[attr-defined]
        if self.server.empty:  # type: ignore[attr-defined]
            tokens, lps, tops, finish = [], [], [], "stop"
        text = model.text(tokens) or None
        if self.server.empty:  # type: ignore[attr-defined]
            text = ""
        want = bool(req.get("logprobs")) and not self.server.ignore_logprobs  # type: ignore[attr-defined]
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
                "logprobs": None,
            }
            if want:
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": model.text([t]),
                            "logprob": lp,
                            "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()],
                        }
                        for t, lp, top in zip(tokens, lps, tops, strict=True)
                    ]
                }
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
            if want:
                choice["logprobs"] = {
                    "tokens": [model.text([t]) for t in tokens],
                    "token_logprobs": lps,
                    "top_logprobs": tops,
                }
        doc = {
            "id": "cmpl-test",
            "object": "chat.completion" if chat else "text_completion",
            "model": MODEL_ID,
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt.encode()), "completion_tokens": len(tokens)},
        }
        shape = self.server.shape  # type: ignore[attr-defined]
        if shape == "choices-object":
            doc["choices"] = {"first": choice}
        elif shape == "no-choices":
            doc["choices"], doc["usage"]["completion_tokens"] = [], 0
        elif shape == "no-usage":
            del doc["usage"]
        elif shape == "deep":
            # written by hand: json.dumps would recurse once per level itself
            depth = 100_000
            self._send_raw(
                200,
                b'{"id": "cmpl-test", "choices": [{"index": 0, "finish_reason": "stop", '
                b'"message": {"role": "assistant", "content": '
                + b"[" * depth
                + b"]" * depth
                + b"}}]}",
            )
            return
        if self.server.drip:  # type: ignore[attr-defined]
            self._drip(doc)
        else:
            self._send(200, doc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--nan", action="store_true", help="set a weight to NaN before serving")
    p.add_argument("--lenient-json", action="store_true", help="write NaN literals")
    p.add_argument("--ignore-logprobs", action="store_true", help="never answer logprobs")
    p.add_argument(
        "--delay", type=float, default=0.0, help="seconds to wait before each completion"
    )
    p.add_argument("--empty", action="store_true", help="answer an empty completion")
    p.add_argument("--logprob", type=float, default=None, help="write this value for every logprob")
    p.add_argument(
        "--drip", type=float, default=0.0, help="send the completion one byte every N seconds"
    )
    p.add_argument(
        "--endless", action="store_true", help="stream a completion body that never ends"
    )
    p.add_argument(
        "--sent-file", default=None, help="with --endless: where to write the bytes sent"
    )
    p.add_argument(
        "--shape",
        choices=("choices-object", "deep", "no-choices", "no-usage"),
        default=None,
        help="answer completions in this broken shape",
    )
    args = p.parse_args(argv)
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.model = Model(args.nan)  # type: ignore[attr-defined]
    srv.lenient = args.lenient_json  # type: ignore[attr-defined]
    srv.ignore_logprobs = args.ignore_logprobs  # type: ignore[attr-defined]
    srv.delay = args.delay  # type: ignore[attr-defined]
    srv.empty = args.empty  # type: ignore[attr-defined]
    srv.logprob = args.logprob  # type: ignore[attr-defined]
    srv.drip = args.drip  # type: ignore[attr-defined]
    srv.endless = args.endless  # type: ignore[attr-defined]
    srv.sent_file = args.sent_file  # type: ignore[attr-defined]
    srv.shape = args.shape  # type: ignore[attr-defined]
    print(f"listening on {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

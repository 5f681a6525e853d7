"""One request to a seat on 127.0.0.1 for the seat check, with one deadline for the whole
answer and at most ANSWER_LIMIT bytes read, however the seat answers."""
# Runs on the host's Python 3.8 or newer (socket.timeout is not TimeoutError before 3.10).
# ruff: noqa: UP031, UP041

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

from fleetdeck.backend.host.seat_check.judge import Bad

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, List, Optional, Tuple

#: the most bytes of one answer the helper reads: a listing of models or an 8-token completion
#: with its logprobs is a few KiB
ANSWER_LIMIT = 1 << 20


def ask_seat(
    port: int, path: str, body: Optional[Any], timeout: float, limit: int = ANSWER_LIMIT
) -> Tuple[int, bytes]:
    """(status, body bytes) of one request to 127.0.0.1:`port`, the whole answer within
    `timeout` seconds and at most `limit` bytes; Bad for no answer, a late or a huge one."""
    url = "http://127.0.0.1:%d%s" % (port, path)
    data = None if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + timeout
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    late: List[bool] = []

    def cut() -> None:  # the one deadline: whatever the helper is waiting for, it stops waiting
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
            raise Bad("unreachable", "nothing listens on %s (connection refused)" % url) from None
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
            raise Bad(
                "answer-too-large",
                "%s announced a %s-byte answer; the check reads at most %d"
                % (url, declared.strip(), limit),
            )
        chunks: List[bytes] = []
        total = 0
        while True:
            b = r.read1(65536)
            if not b:
                break
            total += len(b)
            if total > limit:
                raise Bad(
                    "answer-too-large",
                    "%s sent more than %d bytes; the check stopped reading" % (url, limit),
                )
            chunks.append(b)
        if late or time.monotonic() > deadline:
            raise Bad(
                "timeout", "the answer from %s did not arrive whole within %gs" % (url, timeout)
            )
        return r.status, b"".join(chunks)
    except Bad:
        raise
    except (socket.timeout, TimeoutError):
        raise Bad("timeout", "no whole answer from %s within %gs" % (url, timeout)) from None
    except (http.client.HTTPException, ConnectionError, OSError) as e:
        if late or time.monotonic() >= deadline:
            raise Bad(
                "timeout", "the answer from %s did not arrive whole within %gs" % (url, timeout)
            ) from None
        raise Bad("unreachable", "cannot reach %s: %s" % (url, e)) from None
    finally:
        if timer is not None:
            timer.cancel()
        conn.close()

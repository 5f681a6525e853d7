"""`fleetdeck seats check`: a real tiny model served over HTTP, checked from a real sshd host.

The server (tests/support/seat_server.py) runs `random:tiny` through transformers; its NaN mode sets
one weight to NaN, so the NaN comes out of a real forward pass. The check runs on host h1 of
the loopback sshd fleet, against 127.0.0.1 there.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleetdeck.backend.host.seat_check import judge
from fleetdeck.backend.host.seat_check import main as remote
from fleetdeck.backend.host.seat_check import request as seat_request

from support.seats import start_server

pytestmark = [pytest.mark.sshd, pytest.mark.train]


@pytest.fixture(scope="module")
def sound_seat():
    p, port = start_server()
    yield port
    p.kill()
    p.wait()


@pytest.fixture(scope="module")
def nan_seat():
    p, port = start_server("--nan")
    yield port
    p.kill()
    p.wait()


def cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    from fleetdeck.cli.main import main

    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out.strip().startswith("{") else None), out.err


def test_a_sound_seat_passes_from_the_host(fleet_file, sound_seat, capsys):
    rc, doc, err = cli(capsys, "--hosts", fleet_file, "seats", "check", "h1", sound_seat, "--json")
    assert rc == 0, err
    assert doc["sound"] is True and doc["signature"] is None
    assert doc["model"] == "random:tiny" and doc["endpoint"] == "/v1/chat/completions"
    assert doc["completion_tokens"] == 8 and doc["requests"] == 2


def test_the_nan_seat_is_caught_by_its_logprobs(fleet_file, nan_seat, capsys):
    rc, doc, err = cli(capsys, "--hosts", fleet_file, "seats", "check", "h1", nan_seat, "--json")
    assert rc == 1
    assert doc["sound"] is False and doc["signature"] == "logprob-unserialisable"
    assert "Out of range float values are not JSON compliant" in doc["message"]
    assert "logprob-unserialisable" in err


def test_nan_written_as_literals_is_still_nonfinite():
    p, port = start_server("--nan", "--lenient-json")
    try:
        ans = remote.check({"port": port, "max_tokens": 4})
    finally:
        p.kill()
        p.wait()
    assert ans["sound"] is False and ans["signature"] == "logprob-nonfinite", ans


def test_a_nan_seat_without_logprobs_shows_null_content_at_full_length():
    # the incident's healthcheck view: every completion finish_reason=length, content null
    p, port = start_server("--nan", "--ignore-logprobs")
    try:
        ans = remote.check({"port": port, "max_tokens": 4})
    finally:
        p.kill()
        p.wait()
    assert ans["signature"] == "empty-at-length", ans
    assert "null" in ans["message"]


def test_a_sound_seat_that_ignores_logprobs_is_not_called_sound():
    p, port = start_server("--ignore-logprobs")
    try:
        ans = remote.check({"port": port, "max_tokens": 4})
    finally:
        p.kill()
        p.wait()
    assert ans["sound"] is False and ans["signature"] == "logprobs-missing"


def test_no_answer_in_time_and_nothing_listening(fleet_file, capsys):
    from support.sshfleet import free_port

    p, port = start_server("--delay", "30")
    try:
        ans = remote.check({"port": port, "max_tokens": 2, "timeout": 1})
    finally:
        p.kill()
        p.wait()
    assert ans["signature"] == "timeout" and ans["sound"] is False
    rc, doc, _ = cli(capsys, "--hosts", fleet_file, "seats", "check", "h1", free_port(), "--json")
    assert rc == 1 and doc["signature"] == "unreachable"


@pytest.mark.parametrize(
    "doc,signature",
    [
        (
            {
                "choices": [
                    {
                        "message": {"content": None},
                        "finish_reason": "length",
                        "logprobs": {"content": [{"logprob": -1.0, "top_logprobs": []}]},
                    }
                ]
            },
            "empty-at-length",
        ),
        (
            {
                "choices": [
                    {
                        "message": {"content": "ok"},
                        "finish_reason": "length",
                        "logprobs": {"content": [{"logprob": float("inf"), "top_logprobs": []}]},
                    }
                ]
            },
            "logprob-nonfinite",
        ),
        (
            {
                "choices": [
                    {
                        "text": "ok",
                        "finish_reason": "stop",
                        "logprobs": {"token_logprobs": [-0.5, None], "top_logprobs": []},
                    }
                ]
            },
            "logprob-nonfinite",
        ),
        # no choices at all is an empty answer, never a server error nor a pass
        ({"choices": []}, "empty-completion"),
    ],
)
def test_signatures_of_completion_bodies(doc, signature):
    with pytest.raises(judge.Bad) as e:
        judge.judge_completion(doc, 8)
    assert e.value.signature == signature


def test_a_completions_body_with_finite_logprobs_is_sound():
    doc = {
        "choices": [
            {
                "text": "Paris",
                "finish_reason": "length",
                "logprobs": {"token_logprobs": [-0.1, -0.2], "top_logprobs": [{"P": -0.1}]},
            }
        ],
        "usage": {"completion_tokens": 2},
    }
    assert judge.judge_completion(doc, 2)["logprobs"] == 3


@pytest.mark.parametrize(
    "flags,signature",
    [
        (("--empty",), "empty-completion"),
        (("--logprob", "1e300"), "logprob-out-of-range"),
        (("--logprob", "0.5"), "logprob-out-of-range"),
    ],
)
def test_empty_answers_and_impossible_logprobs_are_unsound(flags, signature):
    p, port = start_server(*flags)
    try:
        ans = remote.check({"port": port, "max_tokens": 4})
    finally:
        p.kill()
        p.wait()
    assert ans["sound"] is False and ans["signature"] == signature, ans


@pytest.mark.parametrize(
    "doc,signature",
    [
        (
            {
                "choices": [
                    {
                        "message": {"content": ""},
                        "finish_reason": "stop",
                        "logprobs": {"content": []},
                    }
                ],
                "usage": {"completion_tokens": 0},
            },
            "empty-completion",
        ),
        (
            {
                "choices": [
                    {
                        "message": {"content": "ok"},
                        "finish_reason": "stop",
                        "logprobs": {"content": [{"logprob": -0.1, "top_logprobs": []}]},
                    }
                ],
                "usage": {"completion_tokens": 0},
            },
            "empty-completion",
        ),
        (
            {
                "choices": [
                    {
                        "message": {"content": "ok"},
                        "finish_reason": "stop",
                        "logprobs": {"content": []},
                    }
                ],
                "usage": {"completion_tokens": 1},
            },
            "empty-completion",
        ),
        (
            {
                "choices": [
                    {
                        "text": "ok",
                        "finish_reason": "stop",
                        "logprobs": {"token_logprobs": [-0.5, -2e5], "top_logprobs": []},
                    }
                ]
            },
            "logprob-out-of-range",
        ),
    ],
)
def test_signatures_of_bodies_that_show_nothing_or_impossible_numbers(doc, signature):
    with pytest.raises(judge.Bad) as e:
        judge.judge_completion(doc, 8)
    assert e.value.signature == signature


def test_an_endless_answer_is_cut_at_the_limit_and_the_helper_stays_small(tmp_path):
    sent = tmp_path / "sent"
    p, port = start_server("--endless", "--sent-file", str(sent))
    code = (
        "import json, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from fleetdeck.backend.host.seat_check import main as r\n"
        "ans = r.check({'port': int(sys.argv[1]), 'max_tokens': 2, 'timeout': 30})\n"
        # VmHWM: this process image's own peak (ru_maxrss carries the forking parent's
        # size across exec, and a pytest that loaded torch is large)
        "hwm = [int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')][0]\n"
        "print(json.dumps([ans, hwm]))\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, str(port)], capture_output=True, text=True, timeout=120
        )
    finally:
        p.kill()
        p.wait()
    assert out.returncode == 0, out.stderr[-2000:]
    ans, maxrss_kib = json.loads(out.stdout)
    assert ans["signature"] == "answer-too-large" and ans["sound"] is False, ans
    assert int(sent.read_text()) > seat_request.ANSWER_LIMIT  # the server did send more than that
    assert maxrss_kib < 200 * 1024


def test_a_dripping_answer_is_a_recorded_timeout_that_fires_the_alert(fleet_file, capsys):
    p, port = start_server(
        "--drip", "0.05"
    )  # every read gets a byte in time; the answer never ends
    try:
        rc, doc, err = cli(
            capsys, "--hosts", fleet_file, "seats", "check", "h1", port, "--json", "--timeout", "2"
        )
    finally:
        p.kill()
        p.wait()
    assert rc == 1 and doc is not None, err
    assert doc["sound"] is False and doc["signature"] == "timeout" and doc["seconds"] < 10, doc
    assert (
        doc["endpoint"] == "/v1/chat/completions" and doc["requests"] == 2
    )  # what it was waiting for
    from fleetdeck.backend.monitor.seats import recorded_checks

    kept = recorded_checks()[f"h1:{port}"]
    assert kept.signature == "timeout" and not kept.sound
    rc, alerts, err = cli(capsys, "--hosts", fleet_file, "alerts", "--json")
    assert rc == 0, err
    fired = [
        a for a in alerts["alerts"] if a["rule"] == "seat-check" and a["subject"] == f"port {port}"
    ]
    assert fired and fired[0]["state"] == "firing" and "timeout" in fired[0]["text"]


# -- a sound verdict names its witness; an answer that shows nothing, or is malformed, is not one --
def test_a_sound_verdict_names_the_tokens_and_logprobs_it_judged(sound_seat):
    ans = remote.check({"port": sound_seat, "max_tokens": 8})
    assert ans["sound"] is True, ans
    assert ans["completion_tokens"] == 8 and ans["tokens_with_logprobs"] == 8
    assert ans["logprobs"] == 16  # a logprob and its top-1 alternative for each token
    assert "answered 8 completion tokens" in ans["message"]
    assert "all 16 logprobs of its 8 tokens are finite" in ans["message"]


def test_without_a_usage_count_the_witness_is_the_tokens_that_carry_a_logprob():
    # before, "answered 0 tokens with finite logprobs" was called sound
    p, port = start_server("--shape", "no-usage")
    try:
        ans = remote.check({"port": port, "max_tokens": 4})
    finally:
        p.kill()
        p.wait()
    assert ans["sound"] is True and ans["completion_tokens"] == 4, ans
    assert "answered 4 completion tokens" in ans["message"] and "0 tokens" not in ans["message"]


@pytest.mark.parametrize(
    "flags,signature,said",
    [
        (("--shape", "no-choices"), "empty-completion", "no choices"),
        (("--empty",), "empty-completion", "content is empty"),
    ],
)
def test_an_empty_answer_is_unsound_with_its_own_code(flags, signature, said):
    p, port = start_server(*flags)
    try:
        ans = remote.check({"port": port, "max_tokens": 4})
    finally:
        p.kill()
        p.wait()
    assert ans["sound"] is False and ans["signature"] == signature and said in ans["message"], ans


@pytest.mark.parametrize(
    "shape,signature,said",
    [
        # before: "seat check failed to run: KeyError: 0"
        ("choices-object", "bad-answer", "the completion's choices is an object, not a list"),
        # before: a RecursionError ("maximum recursion depth exceeded") from the helper's parser
        ("deep", "answer-too-deep", "nests 100004 levels"),
    ],
)
def test_a_malformed_or_over_nested_seat_answer_is_named_from_the_host(
    fleet_file, capsys, shape, signature, said
):
    p, port = start_server("--shape", shape)
    try:
        rc, doc, err = cli(capsys, "--hosts", fleet_file, "seats", "check", "h1", port, "--json")
    finally:
        p.kill()
        p.wait()
    assert rc == 1 and doc is not None, err
    assert doc["sound"] is False and doc["signature"] == signature, doc
    assert (
        said in doc["message"]
        and "recursion" not in doc["message"]
        and "KeyError" not in doc["message"]
    )


@pytest.mark.parametrize(
    "doc,said",
    [
        ([1, 2], "is a list, not a JSON object"),
        ({"object": "chat.completion"}, "has no choices (its fields: object)"),
        ({"choices": ["Paris"]}, 'choices[0] is a string ("Paris"), not an object'),
        ({"choices": [{"message": "Paris"}]}, "choices[0].message is a string"),
        ({"choices": [{"message": {"content": 7}}]}, "content is a number (7), not text"),
        (
            {
                "choices": [
                    {
                        "message": {"content": "ok"},
                        "logprobs": {"content": [{"logprob": -0.1, "top_logprobs": 5}]},
                    }
                ]
            },
            "logprobs.content[0].top_logprobs is a number (5), not a list",
        ),
        (
            {
                "choices": [
                    {"message": {"content": "ok"}, "logprobs": {"content": [{"logprob": -0.1}]}}
                ],
                "usage": {"completion_tokens": "1"},
            },
            "usage.completion_tokens is a string",
        ),
    ],
)
def test_bodies_of_another_shape_are_bad_answers_naming_the_field(doc, said):
    with pytest.raises(judge.Bad) as e:
        judge.judge_completion(doc, 8)
    assert e.value.signature == "bad-answer" and said in e.value.message, e.value.message


async def test_a_sound_answer_without_its_witness_is_not_a_pass(fleet_file, monkeypatch):
    """The controller's side: a host whose check says sound but names no token and no logprob
    (a stand-in helper on a real sshd host) is `no-witness`, never sound."""
    from fleetdeck.backend.fleet.config import load_fleet
    from fleetdeck.backend.fleet.link.ssh import HostLink
    from fleetdeck.backend.monitor import seats

    vacuous = (
        "import json, sys\nsys.stdin.read()\n"
        "print(json.dumps({'ok': True, 'port': 8000, 'sound': True, 'signature': None,"
        " 'message': 'fine', 'model': 'm', 'models': ['m'], 'endpoint': '/v1/completions',"
        " 'requests': 2, 'seconds': 0.1, 'completion_tokens': 0, 'logprobs': 0}))\n"
    )
    monkeypatch.setattr(seats, "CHECK_HELPER", vacuous)
    async with HostLink(load_fleet(str(fleet_file)).host("h1")) as link:
        c = await seats.check_seat(link, 8000)
    assert c.sound is False and c.signature == "no-witness", c
    assert "named no witness (0 completion tokens, 0 logprobs judged)" in c.message

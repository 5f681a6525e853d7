"""The GPU health rules: gpu-throttled held for its `for`, gpu-hot near the slowdown threshold,
gpu-ecc on an uncorrected error or a pending remap, gpu-xid with its code and meaning; a
figure the driver does not report never fires one."""

from __future__ import annotations

import pytest

from fleetdeck.backend.fleet.config import ConfigError, parse_fleet
from fleetdeck.backend.fleet.gpu_health import (
    XID_MEANINGS,
    reason_words,
    throttle_mark,
    xid_meaning,
)
from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, GpuEcc, HostSnapshot, Xid
from fleetdeck.backend.monitor.rules.alerts import AlertEngine, parse_alerts

T0 = 1_800_000_000.0


def card(**kw) -> Gpu:
    base = dict(
        index=0,
        name="NVIDIA H200",
        uuid="GPU-0",
        unified_memory=False,
        memory_total_mib=143771.0,
        memory_used_mib=90000.0,
        utilization_pct=97.0,
        temperature_c=61,
        temperature_slowdown_c=89,
        sm_clock_mhz=1980,
        sm_clock_max_mhz=1980,
        throttle_reasons=(),
        ecc=GpuEcc(uncorrected=0),
        xid=(),
    )
    base.update(kw)
    return Gpu(**base)


def at(t: float, *gpus: Gpu) -> FleetSnapshot:
    return FleetSnapshot(
        hosts=(HostSnapshot(name="h1", reachable=True, time=t, gpus=gpus),), time=t
    )


def seen(out) -> list[tuple[str, str, str]]:
    return [(a.rule, a.subject, a.state) for a in out]


def test_a_healthy_card_and_a_card_that_reports_nothing_fire_nothing():
    e = AlertEngine()
    silent = Gpu(
        index=1,
        name="NVIDIA GB10",
        uuid="GPU-1",
        unified_memory=True,
        memory_total_mib=1.0,
        memory_used_mib=0.5,
        utilization_pct=None,
    )  # every health figure None
    for t in (0, 61, 200):
        assert e.evaluate(at(T0 + t, card(), silent)) == []


def test_gpu_throttled_fires_after_a_slowdown_held_for_its_for_and_not_for_a_power_cap():
    e = AlertEngine()
    slow = card(throttle_reasons=("sw-power-cap", "hw-thermal-slowdown"), sm_clock_mhz=1200)
    assert e.evaluate(at(T0, slow)) == []
    assert e.evaluate(at(T0 + 30, slow)) == []  # 30 s of it: not yet (for = 60 s)
    out = e.evaluate(at(T0 + 61, slow))
    assert seen(out) == [("gpu-throttled", "GPU0", "firing")]
    assert (
        out[0].text
        == "GPU0 on h1 is slowed down: thermal (hardware) (SM at 1200 of 1980 MHz), 61 °C"
    )
    assert seen(e.evaluate(at(T0 + 70, card(throttle_reasons=("sw-power-cap",))))) == [
        ("gpu-throttled", "GPU0", "resolved")
    ]  # a power cap alone is the cap doing its job
    # a slowdown that lapses for one poll starts its wait over
    e2 = AlertEngine()
    e2.evaluate(at(T0, slow))
    e2.evaluate(at(T0 + 40, card()))
    assert e2.evaluate(at(T0 + 70, slow)) == []


def test_gpu_hot_within_the_margin_of_the_slowdown_threshold():
    e = AlertEngine()
    assert e.evaluate(at(T0, card(temperature_c=83))) == []  # 6 °C away: the default margin is 5
    e.evaluate(at(T0 + 10, card(temperature_c=84)))
    out = e.evaluate(at(T0 + 71, card(temperature_c=85)))
    assert seen(out) == [("gpu-hot", "GPU0", "firing")]
    assert out[0].text == "GPU0 on h1 is at 85 °C, 4 °C from its slowdown threshold (89 °C)"
    # no threshold reported: no judgement
    quiet = AlertEngine()
    for t in (0, 100):
        assert quiet.evaluate(at(T0 + t, card(temperature_c=95, temperature_slowdown_c=None))) == []
    # the margin is the fleet file's
    wide = AlertEngine(parse_alerts({"gpu_hot_margin_c": 10, "for": {"gpu-hot": 0}}, "f.toml"))
    assert seen(wide.evaluate(at(T0, card(temperature_c=80)))) == [("gpu-hot", "GPU0", "firing")]


def test_gpu_ecc_on_an_uncorrected_error_or_a_pending_remap_at_once():
    out = AlertEngine().evaluate(at(T0, card(ecc=GpuEcc(uncorrected=2, corrected=40))))
    assert seen(out) == [("gpu-ecc", "GPU0", "firing")]
    assert out[0].text == "GPU0 on h1: 2 uncorrected ECC errors since the driver loaded"
    out = AlertEngine().evaluate(
        at(T0, card(ecc=GpuEcc(uncorrected=0, pending_retirement=True, remap_failure=True)))
    )
    assert (
        "wait to be remapped or retired at the next GPU reset" in out[0].text
        and "remap failed" in out[0].text
    )
    # corrected errors alone are ECC doing its job; unknown counts are not errors
    assert AlertEngine().evaluate(at(T0, card(ecc=GpuEcc(corrected=1000, uncorrected=0)))) == []
    assert AlertEngine().evaluate(at(T0, card(ecc=GpuEcc()))) == []


def test_gpu_xid_fires_with_its_code_and_meaning_and_resolves_after_the_hold():
    e = AlertEngine()
    x79 = Xid(time=T0 + 5, code=79)
    out = e.evaluate(at(T0 + 6, card(xid=(x79,))))
    assert seen(out) == [("gpu-xid", "GPU0 Xid 79", "firing")]
    assert out[0].since == T0 + 5
    assert "reported Xid 79 (at " in out[0].text and out[0].text.endswith(
        "GPU has fallen off the bus (reboot the host)"
    )
    # a second code is its own alert; the same code again updates the text, it does not page again
    out = e.evaluate(at(T0 + 20, card(xid=(x79, Xid(T0 + 15, 13), Xid(T0 + 18, 79)))))
    assert seen(out) == [("gpu-xid", "GPU0 Xid 13", "firing")]
    assert "(2 times, last at" in next(a for a in e.firing() if a.subject == "GPU0 Xid 79").text
    # after event_hold_minutes (15) the Xids are history
    out = e.evaluate(at(T0 + 18 + 15 * 60, card(xid=(x79, Xid(T0 + 15, 13), Xid(T0 + 18, 79)))))
    assert sorted(seen(out)) == [
        ("gpu-xid", "GPU0 Xid 13", "resolved"),
        ("gpu-xid", "GPU0 Xid 79", "resolved"),
    ]


def test_the_xid_table_names_the_common_codes():
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120):
        assert code in XID_MEANINGS
    assert "NVIDIA's Xid catalogue" in xid_meaning(99999)


def test_reasons_in_words_and_the_fleet_rows_mark():
    assert (
        reason_words(None) == "?" and reason_words(()) == "-" and reason_words(("idle",)) == "idle"
    )
    assert (
        reason_words(("sw-power-cap", "hw-slowdown", "0x400"))
        == "power cap, hardware slowdown, 0x400"
    )
    assert (
        throttle_mark(card(throttle_reasons=("sw-power-cap", "hw-thermal-slowdown")))
        == "hw-thermal-slowdown"
    )
    assert throttle_mark(card(throttle_reasons=("sw-power-cap",))) == "sw-power-cap"
    assert (
        throttle_mark(card(throttle_reasons=("idle",))) is None
        and throttle_mark(card(throttle_reasons=None)) is None
    )


def test_the_gpu_rules_take_for_and_disabled_and_the_margin_is_bounded():
    base = '[hosts.a]\naddress = "a"\n'
    fleet = parse_fleet(
        base + '[alerts]\ndisabled = ["gpu-xid"]\nfor = { gpu-throttled = 300 }\n', "f.toml"
    )
    assert (
        fleet.alerts.for_seconds("gpu-throttled") == 300
        and fleet.alerts.for_seconds("gpu-ecc") == 0
    )
    e = AlertEngine(fleet.alerts)
    assert e.evaluate(at(T0, card(xid=(Xid(T0, 79),)))) == []
    with pytest.raises(ConfigError, match="gpu_hot_margin_c"):
        parse_fleet(base + "[alerts]\ngpu_hot_margin_c = 200\n", "f.toml")


def test_a_card_the_driver_lost_fires_gpu_lost_and_its_xid_and_nothing_else():
    """The probe lists a lost card by name with the driver's words, its Xids and every figure
    unknown: gpu-lost pages at once, even with no Xid read, its Xid 79 pages with its meaning,
    and no rule reads its empty memory (0 of 0 MiB in the model) as a card full."""
    from fleetdeck.backend.fleet.models import GpuProcess

    lost = Gpu(
        index=0,
        name="NVIDIA H200",
        uuid="GPU-0",
        unified_memory=False,
        memory_total_mib=0.0,
        memory_used_mib=0.0,
        utilization_pct=None,
        xid=(Xid(T0, 79),),
        lost="GPU is lost",
    )
    out = AlertEngine().evaluate(at(T0 + 1, lost))
    assert sorted(seen(out)) == [
        ("gpu-lost", "GPU0", "firing"),
        ("gpu-xid", "GPU0 Xid 79", "firing"),
    ]
    by = {a.rule: a for a in out}
    assert (
        by["gpu-lost"].severity == "critical"
        and "the driver says: GPU is lost" in by["gpu-lost"].text
    )
    assert by["gpu-xid"].text.endswith("GPU has fallen off the bus (reboot the host)")
    # no Xid read (the event fell out of the window, or the driver never logged one): still paged
    quiet = AlertEngine().evaluate(at(T0 + 1, Gpu(**{**lost.__dict__, "xid": ()})))
    assert seen(quiet) == [("gpu-lost", "GPU0", "firing")]
    # a seat's card lost: no gpu-headroom read off its 0 of 0 MiB
    from fleetdeck.backend.fleet.seat_model import Seat

    seat = Seat(host="h1", kind="vllm", port=8000, pid=77, pids=(77,))
    snap = FleetSnapshot(
        hosts=(
            HostSnapshot(
                name="h1",
                reachable=True,
                time=T0 + 1,
                seats=(seat,),
                gpus=(
                    Gpu(
                        **{
                            **lost.__dict__,
                            "processes": (
                                GpuProcess(pid=77, user="u", used_mib=0.0, command="vllm"),
                            ),
                        }
                    ),
                ),
            ),
        ),
        time=T0 + 1,
    )
    assert "gpu-headroom" not in {a.rule for a in AlertEngine().evaluate(snap)}
    # back after a reset: resolved
    e = AlertEngine()
    e.evaluate(at(T0, lost))
    assert ("gpu-lost", "GPU0", "resolved") in seen(e.evaluate(at(T0 + 30, card())))

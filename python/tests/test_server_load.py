"""The server side of server-reported load from Python (issue 25): ``liblb.ServerLoad``.

The numbers are the core's (its Rust tests pin the rate window, the latency levels and the
report); these tests check what the binding adds: the clock, the request objects (ended once,
context managers, cancelled when collected), the errors and the argument types, and that a
header reads back through ``parse_orca`` to the same report."""

from __future__ import annotations

import datetime
import gc
import time
from collections.abc import Callable

import pytest

import liblb


def test_start_finish_cancel_and_probe_count_requests() -> None:
    load = liblb.ServerLoad()
    assert load.in_flight == 0 and load.probe() == (0, 0.0)
    before = liblb.Balancer("random", ["a"]).now()
    a, b, c = load.start(), load.start(), load.start()
    assert (a.rif, b.rif, c.rif) == (0, 1, 2)
    assert before <= a.started <= c.started
    assert load.in_flight == 3 and load.probe() == (3, 0.0)
    time.sleep(0.002)
    took = load.finish(a)
    assert took >= 0.002 and a.done and not b.done
    assert load.finish(b, ok=False) > 0.0
    load.cancel(c)
    assert load.in_flight == 0
    # a found nothing in flight: the estimate at rif 0 is its latency (kept in microseconds).
    rif, latency = load.probe()
    assert rif == 0 and latency == pytest.approx(took, abs=1e-6)
    report = load.report()
    assert report.rps_fractional == 2 * report.eps > 0  # 2 completed, 1 failed
    assert report.named_metrics == {"latency_ms": pytest.approx(latency * 1e3), "rif": 0.0}
    assert repr(load) == "<liblb.ServerLoad in_flight=0>"
    assert repr(c) == "<liblb.ServerRequest rif=2 ended>"


def test_window_and_latency_max_age_are_set_and_checked() -> None:
    default = liblb.ServerLoad()
    assert (default.window, default.latency_max_age) == (10.0, 1.0)
    load = liblb.ServerLoad(window=datetime.timedelta(minutes=1), latency_max_age=0.001)
    assert (load.window, load.latency_max_age) == (60.0, 0.001)
    with load.start():
        pass
    time.sleep(0.005)
    assert load.probe() == (0, 0.0), "a 1 ms max age forgot the sample"
    bad: list[tuple[Callable[[], object], str]] = [
        (lambda: liblb.ServerLoad(window=0.5), "window_ms"),
        (lambda: liblb.ServerLoad(window=3601), "window_ms"),
        (lambda: liblb.ServerLoad(latency_max_age=0.0), "latency_max_age_ms"),
        (lambda: liblb.ServerLoad(latency_max_age=-1.0), "latency_max_age_ms"),
        (lambda: liblb.ServerLoad(latency_max_age=float("nan")), "latency_max_age_ms"),
    ]
    for make, option in bad:
        with pytest.raises(liblb.InvalidOptionValueError, match=option) as info:
            make()
        assert info.value.code == "LB_INVALID_OPTION_VALUE"
    with pytest.raises(TypeError, match="latency_max_age"):
        liblb.ServerLoad(latency_max_age="1s")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        liblb.ServerLoad(1.0)  # type: ignore[call-arg]  # keywords only


def test_a_request_ends_once() -> None:
    load = liblb.ServerLoad()
    r = load.start()
    load.finish(r)
    for end in (lambda: load.finish(r), lambda: load.cancel(r)):
        with pytest.raises(liblb.LeaseFinishedError, match="already ended") as info:
            end()
        assert info.value.code == "LB_LEASE_FINISHED"
    assert load.in_flight == 0
    # Another load's request is refused and stays open.
    other = liblb.ServerLoad().start()
    with pytest.raises(ValueError, match="another ServerLoad"):
        load.finish(other)
    assert not other.done


def test_a_with_block_finishes_and_a_lost_request_is_cancelled() -> None:
    load = liblb.ServerLoad()
    with load.start() as r:
        assert load.in_flight == 1 and not r.done
    assert r.done and load.in_flight == 0 and load.report().eps == 0.0
    with pytest.raises(RuntimeError), load.start():
        raise RuntimeError("handler failed")
    assert load.report().eps > 0.0, "an exception counts as a failure"
    # Ended inside the block: the block's end does nothing more.
    with load.start() as r:
        load.cancel(r)
    load.start()  # dropped at once: cancelled, not in flight forever
    gc.collect()
    assert load.in_flight == 0


def test_invalid_utilisations_raise_and_change_nothing() -> None:
    load = liblb.ServerLoad()
    load.set_cpu_utilization(0.5)
    load.set_mem_utilization(0.25)
    load.set_application_utilization(1.5)  # may exceed 1
    for setter, bad in [
        (load.set_cpu_utilization, -1.0),
        (load.set_cpu_utilization, float("inf")),
        (load.set_mem_utilization, 1.5),
        (load.set_application_utilization, float("nan")),
    ]:
        with pytest.raises(liblb.InvalidLoadReportError) as info:
            setter(bad)
        assert info.value.code == "LB_INVALID_LOAD_REPORT"
    assert (load.cpu_utilization, load.mem_utilization, load.application_utilization) == (0.5, 0.25, 1.5)
    load.set_cpu_utilization(2)  # an int is a number
    assert load.cpu_utilization == 2.0


@pytest.mark.parametrize("form", ["text", "bin"])
def test_headers_read_back_to_the_same_numbers(form: str) -> None:
    load = liblb.ServerLoad()
    load.set_cpu_utilization(0.731)
    load.set_mem_utilization(1.0)
    for ok in (True, True, False):
        load.finish(load.start(), ok=ok)
    held = load.start()
    header = load.header(form)  # type: ignore[arg-type]
    assert header.startswith(form.upper() + " ")
    parsed = liblb.parse_orca(header)
    report = load.report()
    assert (parsed.cpu_utilization, parsed.mem_utilization) == (0.731, 1.0)
    assert parsed.named_metrics["rif"] == 1.0
    # Rates are read at each call's own time; the rest is the same report.
    assert parsed.eps == pytest.approx(report.eps, rel=1e-3)
    assert parsed.rps_fractional == pytest.approx(report.rps_fractional, rel=1e-3)
    load.cancel(held)


def test_the_default_header_is_text() -> None:
    assert liblb.ServerLoad().header() == "TEXT named_metrics.rif:0"


def test_bad_arguments() -> None:
    load = liblb.ServerLoad()
    with pytest.raises(liblb.InvalidOptionValueError, match="form") as info:
        load.header("BIN")  # type: ignore[arg-type]
    assert info.value.code == "LB_INVALID_OPTION_VALUE"
    with pytest.raises(TypeError):
        load.header(1)  # type: ignore[arg-type]
    for bad in (None, 1, "request", liblb.Balancer("random", ["a"]).acquire()):
        with pytest.raises(TypeError):
            load.finish(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            load.cancel(bad)  # type: ignore[arg-type]
    r = load.start()
    with pytest.raises(TypeError):
        load.finish(r, ok=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        load.finish(r, False)  # type: ignore[call-arg]
    assert not r.done
    with pytest.raises(TypeError):
        load.set_cpu_utilization("0.5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        liblb.ServerRequest()
    load.cancel(r)

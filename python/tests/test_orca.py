"""ORCA load reports from Python (issue 25): ``liblb.parse_orca`` and ``liblb.LoadReport``.

The parser itself is the core's (its Rust tests port Envoy's ``orca_parser_test.cc``); these
tests check what the binding adds: the argument types, the report object, the errors."""

from __future__ import annotations

import base64
import datetime
import struct
import time

import pytest

import liblb


def double(field: int, value: float) -> bytes:
    """A ``double`` field of an ``OrcaLoadReport`` (wire type 1)."""
    return bytes([field << 3 | 1]) + struct.pack("<d", value)


def named(key: str, value: float) -> bytes:
    """A ``named_metrics`` entry (field 8, a map entry ``{1: key, 2: value}``)."""
    body = bytes([1 << 3 | 2, len(key)]) + key.encode() + double(2, value)
    return bytes([8 << 3 | 2, len(body)]) + body


PROTO = double(1, 0.5) + double(6, 200.0) + double(7, 4.0) + named("rif", 7.0) + double(9, 0.75)


def test_proto_bytes_parse_to_their_fields() -> None:
    r = liblb.parse_orca(PROTO)
    assert (r.cpu_utilization, r.application_utilization, r.rps_fractional, r.eps) == (0.5, 0.75, 200.0, 4.0)
    assert (r.mem_utilization, r.rps) == (0.0, 0)
    assert r.named_metrics == {"rif": 7.0}
    assert r.request_cost == {} and r.utilization == {}


def test_every_header_form_gives_the_same_report() -> None:
    as_bin = "BIN " + base64.b64encode(PROTO).decode()
    as_json = 'JSON {"cpuUtilization": 0.5, "applicationUtilization": 0.75, "rpsFractional": 200, "eps": 4, "namedMetrics": {"rif": 7}}'
    as_text = "TEXT cpu_utilization:0.5, application_utilization:0.75, rps_fractional:200, eps:4, named_metrics.rif:7"
    expected = liblb.parse_orca(PROTO)
    for value in (as_bin, as_json, as_text):
        assert liblb.parse_orca(value) == expected, value
        assert liblb.parse_orca(value.encode()) == expected, value
        assert liblb.parse_orca(bytearray(value.encode())) == expected, value


def test_maps_keep_the_reports_order() -> None:
    r = liblb.parse_orca("TEXT named_metrics.z:1, named_metrics.a:2, named_metrics.m:3")
    assert list(r.named_metrics) == ["z", "a", "m"]


def test_the_report_is_a_value() -> None:
    r = liblb.parse_orca(PROTO)
    assert r == liblb.parse_orca(PROTO)
    assert r != liblb.parse_orca(b"")
    assert repr(r) == (
        "LoadReport(cpu_utilization=0.5, application_utilization=0.75, rps_fractional=200.0, "
        "eps=4.0, named_metrics={'rif': 7.0})"
    )
    assert repr(liblb.parse_orca("TEXT eps:1e-300, named_metrics.x:-0.5")) == (
        "LoadReport(eps=1e-300, named_metrics={'x': -0.5})"
    )
    assert repr(liblb.parse_orca(b"")) == "LoadReport()"
    with pytest.raises(AttributeError):
        r.cpu_utilization = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(r)
    # The maps are copies: changing one changes nothing in the report.
    r.named_metrics["rif"] = 0.0
    assert r.named_metrics == {"rif": 7.0}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("TEXT cpu_utilization:high", "cpu_utilization"),
        ("TEXT cpu:0.3", "cpu"),
        ("BIN ***", "base64"),
        ('JSON {"cpu": 1}', "cpu"),
        ("YAML cpu: 1", "unsupported ORCA header format"),
        (bytes([1 << 3 | 0, 1]), "wire type"),
        (PROTO[:5], "byte"),
    ],
)
def test_bad_reports_raise_a_specific_error(data: str | bytes, words: str) -> None:
    with pytest.raises(liblb.InvalidLoadReportError) as info:
        liblb.parse_orca(data)
    assert info.value.code == "LB_INVALID_LOAD_REPORT"
    assert words in str(info.value), str(info.value)
    assert isinstance(info.value, liblb.Error)


@pytest.mark.parametrize("data", [None, 1, 0.5, ["TEXT eps:1"], memoryview(b"")])
def test_other_types_are_a_type_error(data: object) -> None:
    with pytest.raises(TypeError, match="bytes, bytearray or str"):
        liblb.parse_orca(data)  # type: ignore[arg-type]


def test_a_str_with_a_lone_surrogate_is_refused_not_crashed() -> None:
    with pytest.raises(liblb.InvalidUtf8Error):
        liblb.parse_orca("TEXT named_metrics.\ud800:1")


def _wrr(weight_update_period_ms: int | None = None) -> liblb.Balancer:
    return liblb.Balancer(
        "client_side_wrr",
        ["a", "b", "c"],
        blackout_period_ms=0,
        weight_update_period_ms=weight_update_period_ms,
    )


def test_report_load_weighs_client_side_wrr() -> None:
    # gRPC's weighted_round_robin_test.cc `Basic`: 0.9 and 0.3 utilisation at 100 qps weigh
    # 1:3, the silent node the mean (2). Reports before the first pick count at once.
    b = _wrr()
    b.report_load("a", liblb.parse_orca("TEXT application_utilization=0.9,rps_fractional=100"))
    b.report_load("b", b"TEXT application_utilization=0.3,rps_fractional=100")
    picks = [b.pick() for _ in range(600)]
    assert [picks.count(n) for n in "abc"] == [100, 300, 200]


def test_a_lease_carries_its_load_report() -> None:
    b = _wrr(weight_update_period_ms=100)
    lease = b.acquire()
    assert lease.id == "a"
    lease.finish(load="TEXT application_utilization=0.9,rps_fractional=100")
    assert lease.done
    b.acquire().finish(ok=True, load=liblb.parse_orca("TEXT cpu_utilization=0.3,rps_fractional=100"))
    time.sleep(0.2)  # past the 100 ms update period (the first acquire built the scheduler)
    picks = [b.pick() for _ in range(600)]
    assert [picks.count(n) for n in "abc"] == [100, 300, 200]


def test_bad_load_reports_change_nothing() -> None:
    b = _wrr()
    with pytest.raises(liblb.UnknownNodeError):
        b.report_load("zz", "TEXT cpu_utilization=0.5,rps_fractional=1")
    with pytest.raises(liblb.InvalidLoadReportError):
        b.report_load("a", "TEXT cpu:1")
    with pytest.raises(TypeError, match="LoadReport, bytes, bytearray or str"):
        b.report_load("a", 0.5)  # type: ignore[arg-type]
    lease = b.acquire()
    with pytest.raises(liblb.InvalidLoadReportError):
        lease.finish(load="BIN !")
    assert not lease.done  # the lease stays open after a bad report
    lease.finish()
    assert [b.pick() for _ in range(3)] == ["b", "c", "a"]


def test_client_side_wrr_options() -> None:
    b = liblb.Balancer("client_side_wrr", ["a"], error_utilization_penalty=0.5)
    assert "error_utilization_penalty=0.5" in repr(b)
    with pytest.raises(liblb.InvalidOptionValueError, match="at least 0"):
        liblb.Balancer("client_side_wrr", ["a"], error_utilization_penalty=-1)
    with pytest.raises(liblb.InvalidOptionValueError):
        liblb.Balancer("client_side_wrr", ["a"], weight_expiration_period_ms=0)


def test_prequal_probes() -> None:
    b = liblb.Balancer("prequal", ["a", "b", "c"], seed=7)
    assert b.probes_due() == 0
    b.pick()  # an empty pool: a random node
    assert b.probes_due() == 3  # probe_rate 3 per pick, handed out once
    assert b.probes_due() == 0
    targets = b.probe_targets(5)
    assert sorted(targets) == ["a", "b", "c"]
    b.offer_probe("a", 5, 0.020)
    b.offer_probe("b", 0, datetime.timedelta(milliseconds=1))
    assert b.pick() == "b"  # idle and fast
    with pytest.raises(liblb.UnknownNodeError):
        b.offer_probe("zz", 0, 0.001)
    with pytest.raises(TypeError, match="rif must be int"):
        b.offer_probe("a", "5", 0.001)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rif must be >= 0"):
        b.offer_probe("a", -1, 0.001)
    b.offer_probe("c", 2**40, 0.001)  # saturates
    # A load report with rif and latency_ms is a probe answer too.
    b.report_load("c", "TEXT named_metrics.latency_ms:0.5,named_metrics.rif:0")
    assert liblb.Balancer("prequal", ["a"], q_rif="0.5") is not None
    with pytest.raises(liblb.InvalidOptionValueError, match="q_rif"):
        liblb.Balancer("prequal", ["a"], q_rif=101)

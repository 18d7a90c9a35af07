"""Options as a whole (issue 19): keyword arguments in any order, the rules between options
checked once when the balancer is built, Envoy's max_ejection_time default that follows a longer
base, ``repr`` that evaluates back, the balancer's clock (``now``, ``until``, ``remaining``) and
error messages that stay short. ``python -m liblb.etcd -o`` builds its balancer through the same
keyword arguments, so it is checked here too.
"""

from __future__ import annotations

from typing import Any

import pytest

import liblb
import liblb.etcd

ORDERED = [
    {"max_ejection_time_ms": 1000, "base_ejection_time_ms": 500},
    {"max_ring_size": 512, "min_ring_size": 256},
    {"max_ejection_time_ms": "1000", "base_ejection_time_ms": "500"},
]


@pytest.mark.parametrize("options", ORDERED)
def test_options_are_accepted_in_any_order(options: dict[str, Any]) -> None:
    forward = liblb.Balancer("ring_hash", ["a", "b"], **options)
    backward = liblb.Balancer("ring_hash", ["a", "b"], **dict(reversed(options.items())))
    assert repr(forward) == repr(backward)
    for name, value in options.items():
        assert f"{name}={value}" in repr(forward)


@pytest.mark.parametrize(
    ("options", "wrong"),
    [
        ({"max_ejection_time_ms": 500, "base_ejection_time_ms": 1000}, "max_ejection_time_ms"),
        ({"max_ring_size": 256, "min_ring_size": 512}, "max_ring_size"),
        # A max that was given does not follow the base, even at its default value.
        ({"max_ejection_time_ms": 300000, "base_ejection_time_ms": 400000}, "max_ejection_time_ms"),
    ],
)
def test_options_that_disagree_fail_in_any_order(options: dict[str, Any], wrong: str) -> None:
    for order in (options, dict(reversed(options.items()))):
        with pytest.raises(liblb.InvalidOptionValueError, match=wrong):
            liblb.Balancer("ring_hash", ["a"], **order)


def test_an_unset_max_follows_a_longer_base_and_a_zero_base_is_refused() -> None:
    b = liblb.Balancer("round_robin", ["a", "b"], base_ejection_time_ms=400000, consecutive_failures=1)
    b.report("a", ok=False, latency=0.001)
    row = b.stats()[0]
    assert row["status"] == "ejected"
    assert row["remaining"] is not None and 399.0 < row["remaining"] <= 400.0
    with pytest.raises(liblb.InvalidOptionValueError, match="base_ejection_time_ms.*at least 1"):
        liblb.Balancer("round_robin", ["a"], base_ejection_time_ms=0)


@pytest.mark.parametrize(
    "options",
    [
        {"base_ejection_time_ms": 400000},
        {"base_ejection_time_ms": 400000, "max_ejection_time_ms": 400000},
        {"max_ejection_time_ms": 300000},
        {"max_ejection_time_ms": 1000, "base_ejection_time_ms": 500},
        {"max_ring_size": 512, "min_ring_size": 256, "slow_start_aggression": 1.5},
        {"slow_start_aggression": 1e300, "seed": 3, "hash": "xxh3"},
    ],
)
def test_repr_evaluates_back_to_the_same_balancer(options: dict[str, Any]) -> None:
    b = liblb.Balancer("ring_hash", [("a", 2), ("b", 1)], **options)
    again = eval(repr(b), {"Balancer": liblb.Balancer})  # noqa: S307 - our own repr
    assert repr(again) == repr(b)


def test_now_is_the_clock_of_until() -> None:
    b = liblb.Balancer("round_robin", ["a", "b"], consecutive_failures=2, base_ejection_time_ms=60000)
    start = b.now()
    assert isinstance(start, float) and start >= 0.0
    for _ in range(2):
        b.report("a", ok=False, latency=0.001)
    row = b.stats()[0]
    now = b.now()
    assert row["status"] == "ejected" and row["until"] is not None and row["remaining"] is not None
    assert 0.0 < row["until"] - now <= 60.0
    assert 0.0 < row["remaining"] <= 60.0
    assert row["until"] - now <= row["remaining"]
    assert now >= start
    healthy = b.stats()[1]
    assert healthy["until"] is None and healthy["remaining"] is None


def test_errors_name_what_the_option_takes_and_stay_short() -> None:
    with pytest.raises(liblb.InvalidOptionValueError, match='expects a number above 0, got "-1"'):
        liblb.Balancer("round_robin", ["a"], slow_start_aggression=-1)
    with pytest.raises(liblb.InvalidOptionValueError, match="a number above 0"):
        liblb.Balancer("round_robin", ["a"], slow_start_aggression=-(10**400))
    b = liblb.Balancer("round_robin", ["a"])
    for latency in (1e300, 10**300, -(10**300)):
        with pytest.raises(ValueError, match="latency must be") as info:
            b.report("a", ok=True, latency=latency)
        assert len(str(info.value)) < 160, str(info.value)
    with pytest.raises(liblb.InvalidOptionValueError) as opt:
        liblb.Balancer("round_robin", ["a"], vnodes=10**300)
    assert len(str(opt.value)) < 160, str(opt.value)
    # The balancer is unchanged and keeps working after every error.
    assert b.stats()[0]["requests"] == 0 and b.pick() == "a"


class Built(Exception):
    """Raised by the stand-in watcher: the CLI got as far as building its balancer."""

    def __init__(self, balancer: liblb.Balancer) -> None:
        super().__init__("built")
        self.balancer = balancer


def etcd_cli(monkeypatch: pytest.MonkeyPatch, *options: str) -> liblb.Balancer:
    def stand_in(balancer: liblb.Balancer, *_args: object, **_kwargs: object) -> None:
        raise Built(balancer)

    monkeypatch.setattr(liblb.etcd, "EtcdMembership", stand_in)
    args = ["--url", "http://127.0.0.1:1", "--prefix", "svc", "-a", "ring_hash"]
    for option in options:
        args += ["-o", option]
    with pytest.raises(Built) as built:
        liblb.etcd.main(args)
    return built.value.balancer


def test_etcd_cli_options_in_any_order(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = ["max_ejection_time_ms=1000", "base_ejection_time_ms=500", "max_ring_size=512", "min_ring_size=256"]
    forward = etcd_cli(monkeypatch, *pairs)
    backward = etcd_cli(monkeypatch, *reversed(pairs))
    assert repr(forward) == repr(backward)
    assert "max_ejection_time_ms=1000" in repr(forward) and "min_ring_size=256" in repr(forward)


def test_etcd_cli_options_that_disagree(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for options, named in (
        (["base_ejection_time_ms=1000", "max_ejection_time_ms=500"], "max_ejection_time_ms"),
        (["max_ejection_time_ms=500", "base_ejection_time_ms=1000"], "max_ejection_time_ms"),
        (["base_ejection_time_ms=0"], "base_ejection_time_ms"),
    ):
        with pytest.raises(SystemExit) as exited:
            etcd_cli(monkeypatch, *options)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert f'balancer options: option "{named}" expects' in err, err

"""Retry budgets and throttles from Python (issue 21): RetryBudget, RetryThrottle and
AdaptiveThrottle over the core's objects. The numbers are tower's, gRFC A6's and the SRE
book's, which the core's own tests port (core/src/budget.rs); here every argument form, clock
and error reaches the core, and one object works from many threads.
"""

from __future__ import annotations

import datetime
import threading

import pytest

import liblb


def test_retry_budget_reserve_deposits_and_expiry() -> None:
    # tower's tps_reserve: no deposits, a reserve of min_per_sec x ttl = 1 retry.
    b = liblb.RetryBudget(1.0, 1, 1.0, now=0)
    assert b.available(now=0) == 1 and b.can_withdraw(now=0)
    assert b.withdraw(now=0) is True
    assert b.withdraw(now=0) is False
    b.deposit(now=0)  # retry_percent 1.0: one more retry, for the ttl
    assert b.withdraw(now=0.5) is True
    assert b.available(now=2.0) == 1  # the deposit expired, the reserve is back
    # The default budget: 10 s, 10 per second, 20 %.
    d = liblb.RetryBudget()
    assert d.available() == 100  # 10 per second x 10 s
    for _ in range(10):
        d.deposit()
    assert d.available() == 102
    assert 0 <= d.now() < 60


def test_retry_budget_takes_timedeltas_and_its_own_clock() -> None:
    b = liblb.RetryBudget(datetime.timedelta(seconds=2), 0, 0.5)
    assert b.available() == 0
    b.deposit()
    b.deposit()
    assert b.withdraw() and not b.withdraw()


@pytest.mark.parametrize(
    "args,option",
    [
        ((0.5,), "ttl_ms"),
        ((61,), "ttl_ms"),
        ((-1.0,), "ttl_ms"),
        ((float("nan"),), "ttl_ms"),
        ((10, -1), "min_per_sec"),
        ((10, 2**31 - 1), "min_per_sec"),
        ((10, 10, -0.1), "retry_percent"),
        ((10, 10, 1000.5), "retry_percent"),
        ((10, 10, float("nan")), "retry_percent"),
    ],
)
def test_retry_budget_bad_arguments_are_the_cores_errors(args: tuple[float, ...], option: str) -> None:
    with pytest.raises(liblb.InvalidOptionValueError, match=option) as info:
        liblb.RetryBudget(*args)  # type: ignore[arg-type]
    assert info.value.code == "LB_INVALID_OPTION_VALUE"


def test_bad_times_and_types() -> None:
    b = liblb.RetryBudget()
    for now in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="now must be a finite number of seconds >= 0"):
            b.deposit(now=now)
    with pytest.raises(TypeError, match="now must be float seconds, got str"):
        b.withdraw(now="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        liblb.RetryBudget("10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="min_per_sec must be int"):
        liblb.RetryBudget(10, 1.5)  # type: ignore[arg-type]
    assert b.available(now=0) == 100, "refused calls changed nothing"


def test_retry_throttle_a6() -> None:
    t = liblb.RetryThrottle(10, 0.5)
    assert t.tokens == 10 and t.allows
    assert [t.failure() for _ in range(5)] == [True, True, True, True, False]
    assert not t.allows and t.tokens == 5
    t.success()
    assert t.allows and t.tokens == 5.5
    # Digits past the third decimal are dropped, as A6 says.
    t = liblb.RetryThrottle(3, 0.5466)
    t.failure()
    t.success()
    assert t.tokens == pytest.approx(2.546)
    for args, option in [((0, 0.5), "max_tokens"), ((1001, 0.5), "max_tokens"),
                         ((-1, 0.5), "max_tokens"), ((10, 0.0009), "token_ratio"),
                         ((10, float("nan")), "token_ratio")]:
        with pytest.raises(liblb.InvalidOptionValueError, match=option):
            liblb.RetryThrottle(*args)


def test_adaptive_throttle_sre_book() -> None:
    a = liblb.AdaptiveThrottle(now=0)
    assert a.rejection(now=0) == 0
    # Nothing is rejected until the window holds 100 requests (DEFAULT_MIN_REQUESTS); then,
    # none accepted: p = 100 / 101.
    assert all(a.admit(now=1, random=2**64 - 1) for _ in range(100))
    assert a.rejection(now=1) == pytest.approx(100 / 101)
    assert a.admit(now=1, random=0) is False
    for _ in range(51):
        a.accepted(now=1)
    assert a.rejection(now=1) == 0  # 101 requests < 2 x 51 accepts
    # 150 s later the 120 s window has forgotten them all.
    assert a.rejection(now=150) == 0
    with pytest.raises(ValueError, match="random must be an integer"):
        a.admit(random=-1)
    with pytest.raises(liblb.InvalidOptionValueError, match="k"):
        liblb.AdaptiveThrottle(0.5)
    with pytest.raises(liblb.InvalidOptionValueError, match="window_ms"):
        liblb.AdaptiveThrottle(2, 0.5)
    # Without `random` the throttle draws its own: every request accepted keeps p at 0, so
    # every request is admitted.
    fresh = liblb.AdaptiveThrottle(2, datetime.timedelta(seconds=30))
    for _ in range(5):
        assert fresh.admit()
        fresh.accepted()


def test_shared_between_threads() -> None:
    b = liblb.RetryBudget(10, 0, 1.0, now=0)
    t = liblb.RetryThrottle(1000, 1)

    def work() -> None:
        for _ in range(1000):
            b.deposit(now=1)
            t.failure()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert b.available(now=1) == 4000
    assert t.tokens == 0

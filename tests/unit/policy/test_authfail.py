"""SPEC SEC5: jpu.policy.authfail — failed authentications throttled per client, `now` given."""

from __future__ import annotations

from jpu.policy.authfail import AuthThrottle


def test_client_is_throttled_after_limit_failures_in_window_SEC5() -> None:
    t = AuthThrottle(limit=3, window_s=60.0)
    for i in range(3):
        assert t.retry_after("a", 100.0 + i) == 0.0
        t.failed("a", 100.0 + i)
    assert t.retry_after("a", 103.0) == 57.0  # until the first failure leaves the window
    assert t.retry_after("b", 103.0) == 0.0  # another client is not affected


def test_one_more_try_once_the_oldest_failure_leaves_the_window_SEC5() -> None:
    t = AuthThrottle(limit=2, window_s=10.0)
    t.failed("a", 0.0)
    t.failed("a", 5.0)
    assert t.retry_after("a", 9.0) == 1.0
    assert t.retry_after("a", 10.0) == 0.0
    assert t.failed("a", 10.0) == 2  # 5.0 and 10.0: at most `limit` guesses per window
    assert t.retry_after("a", 10.0) == 5.0


def test_failures_outside_the_window_are_forgotten_SEC5() -> None:
    t = AuthThrottle(limit=3, window_s=10.0)
    t.failed("a", 0.0)
    t.failed("a", 1.0)
    assert t.failed("a", 20.0) == 1
    assert t.retry_after("a", 20.0) == 0.0


def test_limit_zero_turns_throttling_off_SEC5() -> None:
    t = AuthThrottle(limit=0, window_s=10.0)
    for i in range(100):
        t.failed("a", float(i))
    assert t.retry_after("a", 100.0) == 0.0


def test_memory_is_bounded_by_max_clients_SEC5() -> None:
    t = AuthThrottle(limit=1, window_s=60.0, max_clients=2)
    for c in ("a", "b", "c"):
        t.failed(c, 0.0)
    assert t.retry_after("a", 1.0) == 0.0  # the least recently failing one is forgotten
    assert t.retry_after("c", 1.0) > 0

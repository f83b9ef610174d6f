"""The one way tests wait: poll a condition until a deadline (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Call ``check`` until it returns something truthy and return that; fail the test
    with ``what`` once ``timeout`` seconds have passed without it."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(interval)


def wait_while_progressing(
    check: Callable[[], T],
    *,
    progress: Callable[[], object],
    stall: float,
    limit: float,
    interval: float = 0.02,
    what: str = "",
) -> T:
    """``wait_until`` with a deadline that moves with the work: fail once ``progress()``
    (a count of what is done, say) has not changed for ``stall`` seconds, or once
    ``limit`` seconds have passed in all. A loaded machine slows the work down and the
    wait follows it; work that stops, or never ends, still fails."""
    start = time.monotonic()
    last, moved = progress(), start
    while True:
        value = check()
        if value:
            return value
        now = time.monotonic()
        seen = progress()
        if seen != last:
            last, moved = seen, now
        if now - moved > stall:
            raise AssertionError(
                f"no progress for {stall} s (still at {last!r}) waiting for {what or check}"
            )
        if now - start > limit:
            raise AssertionError(f"timed out after {limit} s waiting for {what or check}")
        time.sleep(interval)

"""The waits of tests/polling.py: a moving deadline still fails work that stalls or
never ends."""

from __future__ import annotations

import itertools

import pytest

from tests.polling import wait_while_progressing


def test_a_wait_that_keeps_progressing_returns_what_the_check_returned() -> None:
    counter = itertools.count()
    done = [0]

    def check() -> int:
        done[0] = next(counter)
        return done[0] if done[0] >= 5 else 0

    assert wait_while_progressing(check, progress=lambda: done[0], stall=5, limit=30) == 5


def test_a_wait_without_progress_fails_after_the_stall() -> None:
    with pytest.raises(AssertionError, match=r"no progress for 0\.05 s \(still at 3\)"):
        wait_while_progressing(lambda: False, progress=lambda: 3, stall=0.05, limit=30)


def test_a_wait_that_progresses_forever_fails_at_the_limit() -> None:
    counter = itertools.count()
    with pytest.raises(AssertionError, match=r"timed out after 0\.1 s waiting for the end"):
        wait_while_progressing(
            lambda: False, progress=lambda: next(counter), stall=5, limit=0.1, what="the end"
        )

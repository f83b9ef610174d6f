"""``manage.py simulate``: its options are checked before anything runs."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--debounce-ms", "-5"], "--debounce-ms must not be negative."),
        (["--cycle-interval", "0"], "--cycle-interval must be positive."),
    ],
)
def test_bad_options_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("simulate", "--cycle", "on-event", *args)


def test_unknown_cycle_mode_is_refused() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'hourly'"):
        call_command("simulate", "--cycle", "hourly")

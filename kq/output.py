"""Answers on stdout as a table for people, or JSON / YAML for scripts.

JSON and YAML print what the API answered (lists as a list of its objects), so a script
reads the same fields docs/api.md describes. Tables are for eyes only: their layout may
change between versions.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml

FORMATS = ("table", "json", "yaml")

Column = tuple[str, Callable[[dict[str, Any]], Any]]


def dump(data: Any, fmt: str, out: TextIO) -> None:
    if fmt == "json":
        out.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    elif fmt == "yaml":
        out.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
    else:
        raise ValueError(fmt)


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return str(value).replace("\n", " ")


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], out: TextIO) -> None:
    """Left-aligned columns; the last one takes what is left of the terminal's width."""
    cells = [[cell(get(row)) for _, get in columns] for row in rows]
    headers = [name for name, _ in columns]
    widths = [
        max([len(headers[i])] + [len(line[i]) for line in cells]) for i in range(len(columns))
    ]
    room = shutil.get_terminal_size((160, 24)).columns - sum(w + 2 for w in widths[:-1])
    widths[-1] = max(len(headers[-1]), min(widths[-1], max(room, 20)))

    def line(values: Sequence[str]) -> str:
        parts = [v.ljust(w) for v, w in zip(values[:-1], widths[:-1], strict=True)]
        last = values[-1]
        if len(last) > widths[-1]:
            last = last[: widths[-1] - 1] + "…"
        return "  ".join([*parts, last]).rstrip()

    out.write(line(headers) + "\n")
    for values in cells:
        out.write(line(values) + "\n")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def duration(seconds: float) -> str:
    seconds = round(abs(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s" if minutes < 10 else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def relative(value: str | None, now: datetime | None = None) -> str:
    """ "in 4m10s", "2m ago", or "-"."""
    when = parse_time(value)
    if when is None:
        return "-"
    now = now or datetime.now(UTC)
    delta = (when - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def clock(value: str | None) -> str:
    """The local wall-clock time of an ISO timestamp (date too when not today)."""
    when = parse_time(value)
    if when is None:
        return "-"
    local = when.astimezone()
    if local.date() == datetime.now().astimezone().date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M")

"""Timestamps of the path from a job's finish to the next admission (``KQ_TRACE``).

Off by default; with ``KQ_TRACE=1`` each step logs one line at WARNING on the
``queueing.trace`` logger, so a deployment at its usual log level (and the end-to-end
benchmark's tenth-scale run) collects them::

    TRACE <unix time> <pid> <step> <JSON of the step's fields>

The steps (docs/realtime.md §7): ``informer`` (a watch event saw a job change state),
``wake`` (a react task sent), ``task`` (a react or tick picked up by a worker, with how
late after its due time), ``sync`` (the sync's parts), ``committed`` (the sync committed
these jobs' transitions), ``cycle`` (one tree's cycle, its parts and what it admitted)
and ``task_done``. ``tests/bench/trace_handoff.py`` joins them with the fake API
server's log into the hand-off of each finish.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger("queueing.trace")

_on: bool | None = None


def on() -> bool:
    global _on
    if _on is None:
        _on = os.environ.get("KQ_TRACE", "").strip().lower() in ("1", "true", "yes", "on")
    return _on


def mark(step: str, **fields: Any) -> None:
    """One step, stamped now (no-op unless ``KQ_TRACE`` is on)."""
    if not on():
        return
    log.warning(
        "TRACE %.4f %d %s %s",
        time.time(),
        os.getpid(),
        step,
        json.dumps(fields, default=str, separators=(",", ":")),
    )


def parse(line: str) -> tuple[float, int, str, dict[str, Any]] | None:
    """(time, pid, step, fields) of a TRACE line, None for any other line."""
    at = line.find("TRACE ")
    if at < 0:
        return None
    parts = line[at + 6 :].rstrip("\n").split(" ", 3)
    if len(parts) != 4:
        return None
    try:
        return float(parts[0]), int(parts[1]), parts[2], json.loads(parts[3])
    except ValueError:
        return None


_local = threading.local()


def joined(n: int = 1) -> None:
    """``n`` more statements of this thread went in one call to the database than the one
    the call counts for (``state.batch``): the meters count them as statements, not as
    round trips."""
    if on():
        _local.joined = getattr(_local, "joined", 0) + n


class Meter:
    """Statements sent (those ``joined`` in one call included), database round trips (the
    calls) and CPU time of this thread since ``start`` (while tracing):
    what a step costs, steadier than its wall time on a loaded machine."""

    def __init__(self) -> None:
        self.statements = 0
        self._joined = 0
        self._cpu = 0.0
        self._hook: Any = None

    def start(self) -> Meter:
        if not on():
            return self
        from django.db import connection

        def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            self.statements += 1
            return execute(sql, params, many, context)

        self._cpu = time.thread_time()
        self._joined = getattr(_local, "joined", 0)
        self._hook = connection.execute_wrapper(count)
        self._hook.__enter__()
        return self

    def stop(self) -> dict[str, Any]:
        """{"statements": n, "round_trips": n, "cpu_ms": ms} (empty when not tracing);
        stops counting."""
        if self._hook is None:
            return {}
        self._hook.__exit__(None, None, None)
        self._hook = None
        joined = getattr(_local, "joined", 0) - self._joined
        return {
            "statements": self.statements + joined,
            "round_trips": self.statements,
            "cpu_ms": round((time.thread_time() - self._cpu) * 1000, 1),
        }

"""The waiting workloads' annotations: position, ETA, reason, explanation."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from queueing import forecasting
from queueing.choices import WAITING_PHASES
from queueing.engine.types import (
    CycleResult,
)
from queueing.models import (
    Workload,
)
from queueing.state.snapshot import SnapshotIndex, from_epoch

log = logging.getLogger(__name__)


def _eta_changed(old: datetime | None, new: datetime | None, now: datetime) -> bool:
    """Avoid rewriting every row each cycle for an ETA that moved by a few seconds."""
    if old is None or new is None:
        return old is not new
    tolerance = max(5.0, 0.02 * abs((new - now).total_seconds()))
    return abs((new - old).total_seconds()) > tolerance


# A full cycle reads every live workload of its tree and rewrites the annotations
# (position, ETA, reason, explanation) of all waiting ones. While that is cheap every
# cycle is full. Once a full cycle costs more than FULL_CYCLE_CHEAP_S, full cycles run
# at most FULL_CYCLE_SHARE of the time (per tree, per process); the cycles between read
# only the first HEAD_ROWS competing workloads of each queue (``build_snapshot(head=)``)
# and re-annotate the first ANNOTATE_FRONT of each queue and the workloads that have no
# position yet: what people look at first, and what is new.
FULL_CYCLE_CHEAP_S = 0.25
FULL_CYCLE_SHARE = 0.1
HEAD_ROWS = 128
ANNOTATE_FRONT = 20
_full_cycles: dict[str, tuple[float, float]] = {}  # root -> (monotonic, cost in s)


def full_cycle_due(root: str) -> bool:
    """Whether the next cycle of ``root`` should be full. The trees of a process share
    one budget: each comes round again once all of their full cycles together fit in
    FULL_CYCLE_SHARE of the time since."""
    last = _full_cycles.get(root)
    if last is None:
        return True
    at, cost = last
    if cost <= FULL_CYCLE_CHEAP_S:
        return True
    together = sum(c for _, c in _full_cycles.values())
    return time.monotonic() - at >= together / FULL_CYCLE_SHARE


def full_cycle_done(root: str, cost_s: float) -> None:
    _full_cycles[root] = (time.monotonic(), cost_s)


# Woken cycles come as often as events do; admissions need every one of them, but the
# forecast of positions and ETAs (most of the engine's time on long queues, and the
# annotations' write) is refreshed at most every KQ_FORECAST_EVERY_S per tree, and only
# while the forecasting cycles of this process's trees together take at most
# FORECAST_SHARE of the time: under a flood of events (Kueue's baseline end to end) a
# tree came round every 1-2 s, so nearly every cycle forecast, and forecasting took
# most of the worker that admissions needed. A cycle without it leaves the stored
# positions, ETAs and reasons as they are (apply's step 5 is skipped).
FORECAST_SHARE = 0.25
_forecasts: dict[str, float] = {}  # root -> monotonic time of its last forecast
_forecast_costs: dict[str, float] = {}  # root -> seconds its last forecasting cycle took


def forecast_due(root: str) -> bool:
    from django.conf import settings

    last = _forecasts.get(root)
    every = settings.KQ_FORECAST_EVERY_S
    if last is None or every <= 0:  # 0: every cycle forecasts (tests, simulations)
        return True
    since = time.monotonic() - last
    if since < every:
        return False
    together = sum(_forecast_costs.get(tree, 0.0) for tree in _forecasts)
    return since >= together / FORECAST_SHARE


def forecast_done(root: str, cost_s: float = 0.0) -> None:
    """A forecasting cycle of ``root`` ended, having taken ``cost_s`` (its whole wall:
    the engine's forecast, the annotations' write and the rest of the cycle)."""
    _forecasts[root] = time.monotonic()
    _forecast_costs[root] = cost_s


def pending_annotations(
    result: CycleResult, index: SnapshotIndex, *, full: bool = True
) -> list[tuple[int, dict[str, Any]]]:
    """Per waiting workload, the stored fields that changed: position, ETA, reason.

    ``full=False`` looks only at the front of each queue and at new workloads."""
    admitted = {a.workload_id for a in result.admissions}
    candidates: list[tuple[int, Mapping[str, Any], Mapping[str, Any]]] = []
    for workload_id, row in index.rows.items():
        if row["phase"] not in WAITING_PHASES or workload_id in admitted:
            continue
        position = result.positions.get(workload_id)
        if (
            not full
            and row["position"] is not None
            and (position is None or position.in_queue > ANNOTATE_FRONT)
        ):
            continue
        eta = result.etas.get(workload_id)
        candidates.append(
            (
                workload_id,
                row,
                {
                    "position": position.in_queue if position else None,
                    # Across queues, a heads-only cycle cannot tell: the full one will.
                    "global_position": (
                        position.global_
                        if position and (full or row["global_position"] is None)
                        else row["global_position"]
                    ),
                    "eta_p50": from_epoch(eta.p50) if eta else None,
                    "eta_p90": from_epoch(eta.p90) if eta else None,
                },
            )
        )
    # The stored explanations, read only for the rows looked at (JSON is not cheap).
    if len(candidates) > 2_000:  # most of the tree: select it by tree, not a huge IN list
        looked_at = Workload.objects.filter(
            phase__in=WAITING_PHASES, quota_id__in=list(index.quota_ids.values())
        )
    else:
        looked_at = Workload.objects.filter(id__in=[c[0] for c in candidates])
    stored = (
        {
            wid: (explanation, eta, first)
            for wid, explanation, eta, first in looked_at.values_list(
                "id", "explanation", "eta", "first_seen_at"
            )
        }
        if candidates
        else {}
    )
    now_s = index.now.timestamp()
    changed: list[tuple[int, dict[str, Any]]] = []
    for workload_id, before, fields in candidates:
        new = dict(fields)
        explanation = result.explanations.get(workload_id)
        as_dict = explanation.to_dict() if explanation else None
        new["reason"] = as_dict["sentence"][:500] if as_dict else ""
        new["explanation"] = as_dict
        old_explanation, old_eta, first_seen = stored.get(workload_id, (None, None, None))
        eta = result.etas.get(workload_id)
        new["eta"] = forecasting.stored_eta(eta, old_eta, now_s)
        # The first forecast of a wait, once (write_annotations never overwrites it).
        new["first"] = (
            (index.now, eta.p50, eta.p90, eta.forecast)
            if first_seen is None and eta is not None and eta.p50 is not None
            else None
        )
        if (
            new["first"] is not None
            or new["eta"] != old_eta
            or new["position"] != before["position"]
            or new["global_position"] != before["global_position"]
            or new["reason"] != before["reason"]
            or new["explanation"] != old_explanation
            or _eta_changed(before["eta_p50"], new["eta_p50"], index.now)
            or _eta_changed(before["eta_p90"], new["eta_p90"], index.now)
        ):
            changed.append((workload_id, new))
    return changed


def _first(
    first: tuple[datetime, float, float | None, float | None] | None, to_db: Any
) -> tuple[Any, ...]:
    if first is None:
        return (None, None, None, None)
    seen, p50, p90, forecast = first
    return (
        to_db(seen),
        to_db(from_epoch(p50)),
        to_db(from_epoch(p90)),
        to_db(from_epoch(forecast if forecast is not None else p50)),
    )


# The columns write_annotations sets per row, with their PostgreSQL types; the first
# forecast's four are written once (COALESCE), never overwritten.
_ANNOTATED = (
    ("position", "integer"),
    ("global_position", "integer"),
    ("eta_p50", "timestamptz"),
    ("eta_p90", "timestamptz"),
    ("reason", "varchar"),
    ("explanation", "jsonb"),
    ("eta", "jsonb"),
    ("first_seen_at", "timestamptz"),
    ("eta_first_p50", "timestamptz"),
    ("eta_first_p90", "timestamptz"),
    ("eta_first_forecast", "timestamptz"),
)
_ONCE = frozenset(("first_seen_at", "eta_first_p50", "eta_first_p90", "eta_first_forecast"))
# Rows per statement (PostgreSQL takes 65,535 parameters).
_ROWS_PER_STATEMENT = 2_500


def write_annotations(changes: Sequence[tuple[int, dict[str, Any]]], now: datetime) -> int:
    """One statement for all changed rows (PostgreSQL: ``UPDATE ... FROM (VALUES ...)``;
    elsewhere one executemany), guarded by phase so racing moves win."""
    if not changes:
        return 0
    q = connection.ops.quote_name
    table = q(Workload._meta.db_table)
    waiting = ", ".join(f"'{phase}'" for phase in WAITING_PHASES)
    to_db = connection.ops.adapt_datetimefield_value
    params = [
        (
            new["position"],
            new["global_position"],
            to_db(new["eta_p50"]),
            to_db(new["eta_p90"]),
            new["reason"],
            json.dumps(new["explanation"]) if new["explanation"] is not None else None,
            json.dumps(new["eta"]) if new.get("eta") is not None else None,
            *_first(new.get("first"), to_db),
            workload_id,
        )
        for workload_id, new in changes
    ]

    def value(column: str, source: str) -> str:
        if column in _ONCE:
            return f"{q(column)} = COALESCE({table}.{q(column)}, {source})"
        return f"{q(column)} = {source}"

    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            sets = ", ".join(value(c, "%s") for c, _ in _ANNOTATED)
            sql = (
                f"UPDATE {table} SET {sets}, {q('updated_at')} = %s "
                f"WHERE {q('id')} = %s AND {q('phase')} IN ({waiting})"
            )
            cursor.executemany(sql, [(*row[:-1], to_db(now), row[-1]) for row in params])
            return len(changes)
        row_sql = "(" + ", ".join([*(f"%s::{t}" for _, t in _ANNOTATED), "%s::bigint"]) + ")"
        names = ", ".join(q(f"v_{c}") for c in [*(c for c, _ in _ANNOTATED), "id"])
        sets = ", ".join(value(c, f"v.{q('v_' + c)}") for c, _ in _ANNOTATED)
        for start in range(0, len(params), _ROWS_PER_STATEMENT):
            chunk = params[start : start + _ROWS_PER_STATEMENT]
            cursor.execute(
                # Identifiers from the model's meta, quoted; every value is a parameter.
                f"UPDATE {table} SET {sets}, {q('updated_at')} = %s "
                f"FROM (VALUES {', '.join([row_sql] * len(chunk))}) AS v({names}) "
                f"WHERE {table}.{q('id')} = v.{q('v_id')} AND {table}.{q('phase')} IN ({waiting})",
                [to_db(now), *(value for row in chunk for value in row)],
            )
    return len(changes)

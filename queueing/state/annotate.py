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
from queueing.state import batch
from queueing.state.snapshot import SnapshotIndex, from_epoch
from queueing.world import Shown

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


def forget() -> None:
    """Forget the process's cycle timings (full cycles, forecasts): the next cycle of
    every tree is full and forecasts, as in a new worker."""
    _full_cycles.clear()
    _forecasts.clear()
    _forecast_costs.clear()


def forecast_done(root: str, cost_s: float = 0.0) -> None:
    """A forecasting cycle of ``root`` ended, having taken ``cost_s`` (its whole wall:
    the engine's forecast, the annotations' write and the rest of the cycle)."""
    _forecasts[root] = time.monotonic()
    _forecast_costs[root] = cost_s


def pending_annotations(
    result: CycleResult, index: SnapshotIndex, *, full: bool = True
) -> list[tuple[int, dict[str, Any]]]:
    """Per waiting workload whose position, ETA or reason changed, what it shows now.

    Compared against what the row shows: its position, ETA and reason from the snapshot's
    rows, its explanation and stored ETA from the tree's world (``world.Shown``: what this
    process last wrote or read, for as long as nobody else wrote the row), else read here
    for the rows the world does not know. An explanation equal (as the engine's tuple) to
    the one shown is not rebuilt. ``full=False`` looks only at the front of each queue and
    at new workloads. Each change carries ``shown``, what the world keeps once written."""
    admitted = {a.workload_id for a in result.admissions}
    tree = index.world
    memory: dict[int, Shown] = tree.shown if tree is not None else {}
    candidates: list[tuple[int, Mapping[str, Any], dict[str, Any]]] = []
    unknown: list[int] = []
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
        if workload_id not in memory:
            unknown.append(workload_id)
    # What the world does not know is read, for those rows only (JSON is not cheap).
    stored: dict[int, tuple[Any, Any, Any]] = {}
    if unknown:
        if len(unknown) > 2_000:  # most of the tree: select it by tree, not a huge IN list
            looked_at = Workload.objects.filter(
                phase__in=WAITING_PHASES, quota_id__in=list(index.quota_ids.values())
            )
        else:
            looked_at = Workload.objects.filter(id__in=unknown)
        stored = {
            wid: (explanation, eta, first)
            for wid, explanation, eta, first in looked_at.values_list(
                "id", "explanation", "eta", "first_seen_at"
            )
        }
    now_s = index.now.timestamp()
    changed: list[tuple[int, dict[str, Any]]] = []
    for workload_id, before, new in candidates:
        explanation = result.explanations.get(workload_id)
        eta = result.etas.get(workload_id)
        known = memory.get(workload_id)
        if known is not None:
            old_eta: Any = known.eta
            first_seen = known.first
            same_explanation = explanation == known.explanation
        else:
            old_explanation, old_eta, first_at = stored.get(workload_id, (None, None, None))
            first_seen = first_at is not None
            same_explanation = False
        if same_explanation:
            new["reason"] = before["reason"]
            as_dict: Any = _UNCHANGED
        else:
            as_dict = explanation.to_dict() if explanation else None
            new["reason"] = as_dict["sentence"][:500] if as_dict else ""
            if known is None and as_dict == old_explanation:
                as_dict = _UNCHANGED
        new["explanation"] = as_dict
        new["eta"] = forecasting.stored_eta(eta, old_eta, now_s)
        # The first forecast of a wait, once (write_annotations never overwrites it).
        new["first"] = (
            (index.now, eta.p50, eta.p90, eta.forecast)
            if not first_seen and eta is not None and eta.p50 is not None
            else None
        )
        new["shown"] = Shown(explanation, new["eta"], first_seen or new["first"] is not None)
        if (
            new["first"] is not None
            or as_dict is not _UNCHANGED
            or new["eta"] != old_eta
            or new["position"] != before["position"]
            or new["global_position"] != before["global_position"]
            or new["reason"] != before["reason"]
            or _eta_changed(before["eta_p50"], new["eta_p50"], index.now)
            or _eta_changed(before["eta_p90"], new["eta_p90"], index.now)
        ):
            changed.append((workload_id, new))
        elif tree is not None:
            # Unchanged: what the database shows is known now (read above, or already).
            memory[workload_id] = new["shown"]
    return changed


def located(
    annotated: Sequence[tuple[int, Any]], index: SnapshotIndex
) -> list[tuple[int, int, int]]:
    """(tenant id, queue id, workload id) of the annotated rows, from the snapshot index:
    what the live stream is told of them (``transitions.publish``)."""
    return [
        (index.rows[i]["tenant_id"], index.rows[i]["queue_id"], i)
        for i, _ in annotated
        if i in index.rows
    ]


class _Unchanged:
    """The explanation a row shows stays as it is (write_annotations keeps the column)."""

    def __repr__(self) -> str:
        return "UNCHANGED"


_UNCHANGED: Any = _Unchanged()


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
# forecast's four are written once (COALESCE), never overwritten; the explanation only
# where it changed (``keep`` false).
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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def write_annotations(changes: Sequence[tuple[int, dict[str, Any]]], now: datetime) -> int:
    """One statement for all changed rows, guarded by phase so racing moves win (see
    ``annotations_statement``); returns how many rows were offered."""
    statement = annotations_statement(changes, now)
    if statement is not None:
        batch.run([statement])
    return len(changes)


def annotations_statement(
    changes: Sequence[tuple[int, dict[str, Any]]], now: datetime
) -> batch.Statement | None:
    """On PostgreSQL the statement ``write_annotations`` sends (None when nothing
    changed), for the caller to send with others (``state.batch``); elsewhere the rows
    are written here (one executemany) and None is returned.

    PostgreSQL: ``UPDATE ... FROM jsonb_to_recordset(%s)``, the rows as one JSON document
    (one parameter, whatever the rows: no per-value placeholders to parse or adapt);
    elsewhere one executemany."""
    if not changes:
        return None
    q = connection.ops.quote_name
    table = q(Workload._meta.db_table)
    waiting = ", ".join(f"'{phase}'" for phase in WAITING_PHASES)

    def value(column: str, source: str, keep: str) -> str:
        if column in _ONCE:
            return f"{q(column)} = COALESCE({table}.{q(column)}, {source})"
        if column == "explanation":
            return f"{q(column)} = CASE WHEN {keep} THEN {table}.{q(column)} ELSE {source} END"
        return f"{q(column)} = {source}"

    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            to_db = connection.ops.adapt_datetimefield_value
            params = []
            for workload_id, new in changes:
                explanation = new["explanation"]
                keep = explanation is _UNCHANGED
                params.append(
                    (
                        new["position"],
                        new["global_position"],
                        to_db(new["eta_p50"]),
                        to_db(new["eta_p90"]),
                        new["reason"],
                        keep,  # the CASE's condition, then its value
                        None if keep or explanation is None else json.dumps(explanation),
                        json.dumps(new["eta"]) if new.get("eta") is not None else None,
                        *_first(new.get("first"), to_db),
                        to_db(now),
                        workload_id,
                    )
                )
            sets = ", ".join(value(c, "%s", "%s") for c, _ in _ANNOTATED)
            sql = (
                f"UPDATE {table} SET {sets}, {q('updated_at')} = %s "
                f"WHERE {q('id')} = %s AND {q('phase')} IN ({waiting})"
            )
            cursor.executemany(sql, params)
            return None
    rows = []
    for workload_id, new in changes:
        first = new.get("first")
        row: dict[str, Any] = {
            "id": workload_id,
            "position": new["position"],
            "global_position": new["global_position"],
            "eta_p50": _iso(new["eta_p50"]),
            "eta_p90": _iso(new["eta_p90"]),
            "reason": new["reason"],
            "eta": new.get("eta"),
            "keep": new["explanation"] is _UNCHANGED,
        }
        if not row["keep"]:
            row["explanation"] = new["explanation"]
        if first is not None:
            seen, p50, p90, forecast = first
            row["first_seen_at"] = _iso(seen)
            row["eta_first_p50"] = _iso(from_epoch(p50))
            row["eta_first_p90"] = _iso(from_epoch(p90))
            row["eta_first_forecast"] = _iso(from_epoch(forecast if forecast is not None else p50))
        rows.append(row)
    record = ", ".join(
        [*(f"{q(c)} {t}" for c, t in _ANNOTATED), f"{q('id')} bigint", f"{q('keep')} boolean"]
    )
    sets = ", ".join(value(c, f"v.{q(c)}", f"v.{q('keep')}") for c, _ in _ANNOTATED)
    return batch.Statement(
        # Identifiers from the model's meta, quoted; the rows are one parameter.
        f"UPDATE {table} SET {sets}, {q('updated_at')} = %s "
        f"FROM jsonb_to_recordset(%s::jsonb) AS v({record}) "
        f"WHERE {table}.{q('id')} = v.{q('id')} AND {table}.{q('phase')} IN ({waiting})",
        [now, json.dumps(rows, separators=(",", ":"))],
    )

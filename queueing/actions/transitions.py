"""Workload phase transitions: the one way the cycle, the sync and the actions move
workloads from phase to phase.

``transition_many`` takes many ``Move``s (a workload, the phases it is expected in, the
phase it goes to, its fields, the reason for its timeline) and, in the caller's
transaction (or one of its own):

1. reads the rows' phases in one query, locking them where the database locks rows
   (``select_for_update``), and keeps the moves whose row is in an expected phase (a
   later move of the same row sees the earlier one's phase);
2. writes each kind of change (same target phase, same fields) as one statement for all
   its rows, conditional on the phase read, so a change made concurrently is never
   overwritten: fields whose value every row shares are set as constants, the others come
   row by row. PostgreSQL: ``UPDATE ... FROM (VALUES ...) ... RETURNING id`` with typed
   columns; SQLite (one writer at a time): one ``executemany``, and a re-read only when
   its row count falls short;
3. inserts the timeline (WorkloadEvent) in one statement;
4. announces the moved rows through ``publish`` (after the commit), unless the caller
   publishes itself (the cycle adds its annotations and its id to the same message).

On PostgreSQL, called outside any transaction with each row moved once (the sync's
chunks), steps 1-3 are one statement, run without a transaction of its own (a single
statement is atomic): no BEGIN and COMMIT round trips. Inside a transaction too, with
each row moved once. Its rows travel as one JSON document per kind
(``jsonb_to_recordset``), not as a placeholder per value.

Why here, in ``actions``: every write goes through the actions or the cycle's apply,
and the import contracts put the actions below both the cycle (``queueing.state``) and
the sync, which both use this; the cancel action uses it too.

It returns what was made and what conflicted (the row was gone or had moved on).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Field, JSONField
from django.db.models.expressions import BaseExpression
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from queueing import events
from queueing.choices import HOLDING_PHASES, TERMINAL_PHASES
from queueing.lease import no_flush_condition
from queueing.models import Workload, WorkloadEvent
from queueing.trees import roots_cte, trees_of

# Parameters per statement at most (PostgreSQL takes 65,535; a margin for the constants).
MAX_PARAMS = 30_000


@dataclass(frozen=True, slots=True)
class Move:
    """One workload's move to ``to_phase`` from one of ``expect``, with its ``fields``."""

    workload_id: int
    to_phase: str
    expect: tuple[str, ...]
    reason: str
    message: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)
    #: The caller's label (which list of its report a made move goes to).
    kind: str = ""


@dataclass(frozen=True, slots=True)
class Made:
    """A move that was written, with what the locked read saw of its row."""

    move: Move
    from_phase: str
    tenant_id: int
    queue_id: int


@dataclass
class Outcome:
    made: list[Made] = field(default_factory=list)
    conflicts: list[Move] = field(default_factory=list)
    #: The timeline events written, in the order of ``made``.
    events: list[WorkloadEvent] = field(default_factory=list)
    #: The moved rows' trees (``trees.roots_and_deciding``), when the statement that
    #: moved them named them (PostgreSQL's one statement, when it publishes).
    trees: tuple[dict[str, list[int]], set[str]] | None = None

    @property
    def changes(self) -> list[tuple[int, int, int]]:
        """(tenant id, queue id, workload id) of the moved rows: what ``publish`` takes."""
        return [(m.tenant_id, m.queue_id, m.move.workload_id) for m in self.made]


def transition_many(
    moves: Sequence[Move], *, at: datetime | None = None, publish_changes: bool = True
) -> Outcome:
    """Make the moves whose rows are still in an expected phase; see the module docstring.

    ``publish_changes=False``: the caller announces ``Outcome.changes`` itself through
    ``publish``."""
    out = Outcome()
    if not moves:
        return out
    at = at or timezone.now()
    # Outside any transaction the one statement is atomic by itself: no BEGIN and COMMIT
    # around it (two round trips); its notifications go at once, as after a commit.
    alone = _outside_transactions()
    if alone and _one_statement(moves, out, at, with_trees=publish_changes):
        if publish_changes:
            publish(out.changes, trees=out.trees)
        return out
    with transaction.atomic(savepoint=False):
        if not alone and _one_statement(moves, out, at, with_trees=publish_changes):
            if publish_changes:
                publish(out.changes, trees=out.trees)
            return out
        rows = _read({m.workload_id for m in moves})
        current = {wid: row[0] for wid, row in rows.items()}
        rounds: list[list[tuple[Move, str]]] = []
        depth: dict[int, int] = {}
        for move in moves:
            from_phase = current.get(move.workload_id)
            if from_phase is None or from_phase not in move.expect:
                out.conflicts.append(move)
                continue
            current[move.workload_id] = move.to_phase  # a later move sees this one
            n = depth.get(move.workload_id, 0)
            depth[move.workload_id] = n + 1
            if n == len(rounds):
                rounds.append([])
            rounds[n].append((move, from_phase))
        # A row moved twice in one call is written in two rounds, in order; a round's
        # move that conflicts makes the row's later moves conflict too (phase condition).
        written: set[tuple[int, int]] = set()
        for number, round_ in enumerate(rounds):
            written.update((number, wid) for wid in _write(round_, at))
        for number, round_ in enumerate(rounds):
            for move, from_phase in round_:
                if (number, move.workload_id) in written:
                    _, tenant_id, queue_id = rows[move.workload_id]
                    out.made.append(Made(move, from_phase, tenant_id, queue_id))
                else:
                    out.conflicts.append(move)
        out.events = WorkloadEvent.objects.bulk_create(
            WorkloadEvent(
                workload_id=m.move.workload_id,
                at=at,
                from_phase=m.from_phase,
                to_phase=m.move.to_phase,
                reason=m.move.reason,
                message=m.move.message,
            )
            for m in out.made
        )
        if publish_changes:
            publish(out.changes)
    return out


def one_statement(moves: Sequence[Move]) -> bool:
    """Whether ``transition_many`` writes these moves in one statement and no transaction
    of its own (PostgreSQL, called outside any transaction, each row moved once, within
    MAX_PARAMS): what it writes is then committed when it returns, and nothing before."""
    ids = {m.workload_id for m in moves}
    # Per row: id, expectations, reason, message, its fields and what clear_for adds.
    params = sum(4 + len(m.fields) + 9 for m in moves)
    return _outside_transactions() and len(ids) == len(moves) and params <= MAX_PARAMS


def _outside_transactions() -> bool:
    return (
        connection.vendor == "postgresql"
        and not connection.in_atomic_block
        and connection.get_autocommit()
    )


def publish(
    changes: Iterable[tuple[int, int, int]],
    *,
    cycle_id: int | None = None,
    trees: tuple[dict[str, list[int]], set[str]] | None = None,
) -> None:
    """The one way workload changes are announced: ``(tenant id, queue id, workload id)``
    go to the live stream in one ``changed`` message per tenant after the commit.

    Outside a cycle (an action, the sync) the trees' worlds are journalled and their
    cycles woken by the notification itself (events.notify_changes). The cycle names its
    ``cycle_id``: its own writes wake no cycle (it journals them for the tree's worlds
    itself, ``world.record_cycle``). ``trees``: the rows' trees, when the statement
    that wrote them named them."""
    events.notify_changes(changes, cycle_id=cycle_id, trees=trees)


def clear_for(to_phase: str, fields: dict[str, Any], reason: str) -> None:
    """What a workload stops showing when it holds quota or ends (explicit fields win)."""
    if to_phase in TERMINAL_PHASES or to_phase in HOLDING_PHASES:
        fields.setdefault("position", None)
        fields.setdefault("global_position", None)
        fields.setdefault("eta_p50", None)
        fields.setdefault("eta_p90", None)
        fields.setdefault("eta", None)
    if to_phase in TERMINAL_PHASES:
        fields.setdefault("explanation", None)
        fields.setdefault("reason", reason)


# --- the statements ------------------------------------------------------------------


def _one_statement(
    moves: Sequence[Move], out: Outcome, at: datetime, *, with_trees: bool = False
) -> bool:
    """PostgreSQL, each row moved once: the locked read, the conditional writes of every
    kind and the timeline in one statement (data-modifying CTEs), filling ``out``.
    False (nothing done) where that does not apply: the steps then go one by one.

    The read locks the rows in id order (``FOR UPDATE``: the latest committed version,
    after waiting for any writer); each kind's UPDATE joins it and writes only the rows
    whose locked phase is one its move expects (and still is: the rows are ours now),
    returning the phase it moved them from; the timeline is inserted from what the
    UPDATEs returned. ``with_trees``: the moved rows' trees too (``trees.roots_cte``),
    for the journal and the wakes (``Outcome.trees``). All in one snapshot and one round
    trip."""
    if connection.vendor != "postgresql":
        return False
    ids = [m.workload_id for m in moves]
    if len(set(ids)) != len(ids):
        return False  # a row moved twice: rounds, in order (transition_many)
    kinds = _kinds([(m, m) for m in moves], at)
    q = connection.ops.quote_name
    table = q(Workload._meta.db_table)
    params: list[Any] = [sorted(ids)]
    parts = [
        f"lk AS (SELECT {q('id')}, {q('phase')}, {q('tenant_id')}, {q('queue_id')}, "  # noqa: S608
        f"{q('quota_id')} "
        f"FROM {table} WHERE {q('id')} = ANY(%s::bigint[]) AND {no_flush_condition()} "
        f"ORDER BY {q('id')} FOR UPDATE)"
    ]
    names: list[str] = []
    values_count = 1  # what row-by-row parameters would have been (MAX_PARAMS, one_statement)
    for number, rows in enumerate(kinds.values()):
        sets, set_params, per_row, fields = _assignments(rows)
        columns = ["id", "expect", "e_reason", "e_message", *(f"v_{f.column}" for f in fields)]
        casts = ["bigint", "varchar[]", "varchar", "varchar", *(_cast(f) for f in fields)]
        assign = sets + [f"{q(f.column)} = v.{q('v_' + f.column)}" for f in fields]
        params += set_params
        values_count += len(set_params) + len(rows) * len(columns)
        # The rows as one JSON document, one parameter: no placeholder per value for the
        # driver to find in the statement and adapt (psycopg's client-side binding split
        # the sync's statement of a few hundred values at every call).
        document = _rows_json(rows, per_row, fields, columns)
        if document is None:
            return False
        params.append(document)
        name = f"u{number}"
        names.append(name)
        parts.append(
            " ".join(
                (
                    f"{name} AS (UPDATE {table} SET {', '.join(assign)}",  # noqa: S608
                    "FROM jsonb_to_recordset(%s::jsonb)",
                    f"AS v({', '.join(f'{q(c)} {t}' for c, t in zip(columns, casts, strict=True))}),",
                    "lk",
                    f"WHERE {table}.{q('id')} = v.{q('id')} AND lk.{q('id')} = v.{q('id')}",
                    f"AND lk.{q('phase')} = ANY(v.{q('expect')})",
                    f"AND {table}.{q('phase')} = lk.{q('phase')}",
                    f"RETURNING {table}.{q('id')} AS wid, lk.{q('phase')} AS from_phase,",
                    f"lk.{q('tenant_id')} AS tenant_id, lk.{q('queue_id')} AS queue_id,",
                    f"lk.{q('quota_id')} AS quota_id,",
                    f"{table}.{q('phase')} AS to_phase, v.{q('e_reason')} AS reason,",
                    f"v.{q('e_message')} AS message)",
                )
            )
        )
    if values_count > MAX_PARAMS:
        return False
    event = q(WorkloadEvent._meta.db_table)
    union = " UNION ALL ".join(f"SELECT * FROM {n}" for n in names)  # noqa: S608
    parts.append(f"m AS ({union})")
    parts.append(
        f"e AS (INSERT INTO {event} ({q('workload_id')}, {q('at')}, {q('from_phase')}, "  # noqa: S608
        f"{q('to_phase')}, {q('reason')}, {q('message')}) "
        "SELECT wid, %s, from_phase, to_phase, reason, message FROM m "
        f"RETURNING {q('id')}, {q('workload_id')})"
    )
    params.append(at)
    root, roots_join = "NULL", ""
    if with_trees:
        parts.append(roots_cte("SELECT quota_id FROM m"))
        root, roots_join = "r.root", " LEFT JOIN kq_roots r ON r.quota_id = m.quota_id"
    sql = (
        "WITH RECURSIVE "
        + ", ".join(parts)
        + f" SELECT m.wid, m.from_phase, m.tenant_id, m.queue_id, e.{q('id')}, {root} "
        + f"FROM m JOIN e ON e.{q('workload_id')} = m.wid{roots_join}"
    )
    trees: list[tuple[int, str | None, str]] = []
    with connection.cursor() as cursor:
        # Identifiers from the models' meta, quoted; every value is a parameter.
        cursor.execute(sql, params)
        written = {}
        for wid, phase, tenant_id, queue_id, eid, tree in cursor.fetchall():
            written[int(wid)] = (str(phase), int(tenant_id), int(queue_id), int(eid))
            trees.append((int(wid), tree, ""))
    for move in moves:
        row = written.get(move.workload_id)
        if row is None:
            out.conflicts.append(move)
            continue
        from_phase, tenant_id, queue_id, eid = row
        out.made.append(Made(move, from_phase, tenant_id, queue_id))
        saved = WorkloadEvent(
            id=eid,
            workload_id=move.workload_id,
            at=at,
            from_phase=from_phase,
            to_phase=move.to_phase,
            reason=move.reason,
            message=move.message,
        )
        saved._state.adding, saved._state.db = False, connection.alias
        out.events.append(saved)
    if with_trees:
        phases = {m.move.workload_id: m.move.to_phase for m in out.made}
        out.trees = trees_of((wid, tree, phases[wid]) for wid, tree, _ in trees)
    return True


def _rows_json(
    rows: list[tuple[int, Move, dict[str, Any]]],
    per_row: list[str],
    fields: list[Field],
    columns: list[str],
) -> str | None:
    """A kind's rows as the JSON array ``jsonb_to_recordset`` reads (keys ``columns``):
    each value as the field would be saved (JSON fields as they are, timestamps in ISO
    8601 with their offset: exact to the microsecond). None if a value has no faithful
    JSON form (a float that is not finite): the caller writes row by row instead."""
    out: list[dict[str, Any]] = []
    for wid, move, values in rows:
        row: dict[str, Any] = {
            "id": wid,
            "expect": [str(phase) for phase in move.expect],
            "e_reason": move.reason,
            "e_message": move.message,
        }
        for column, n, f in zip(columns[4:], per_row, fields, strict=True):
            value = (
                values[n] if isinstance(f, JSONField) else f.get_db_prep_save(values[n], connection)
            )
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, float) and not math.isfinite(value):
                return None
            row[column] = value
        out.append(row)
    try:
        return json.dumps(out, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):  # a value JSON cannot hold faithfully
        return None


def _read(ids: set[int]) -> dict[int, tuple[str, int, int]]:
    """id -> (phase, tenant id, queue id), read and locked in one query. In id order:
    two transactions locking overlapping rows take them in the same order, so they wait
    for each other instead of deadlocking."""
    return {
        wid: (phase, tenant_id, queue_id)
        for wid, phase, tenant_id, queue_id in Workload.objects.select_for_update()
        .filter(id__in=ids)
        .order_by("id")
        .values_list("id", "phase", "tenant_id", "queue_id")
    }


def _kinds(
    moves: Sequence[tuple[Move, Any]], at: datetime
) -> dict[tuple[Any, ...], list[tuple[int, Any, dict[str, Any]]]]:
    """The moves by kind of change (same fields, same expressions): (id, tag, values)."""
    kinds: dict[tuple[Any, ...], list[tuple[int, Any, dict[str, Any]]]] = {}
    for move, tag in moves:
        values = dict(move.fields)
        clear_for(move.to_phase, values, move.message or move.reason)
        values["phase"] = move.to_phase
        values["updated_at"] = at
        # Expressions (F("attempts") + 1) cannot travel per row: they are part of the kind.
        shape = tuple(
            sorted(
                (name, v if isinstance(v, BaseExpression) else None) for name, v in values.items()
            )
        )
        kinds.setdefault(shape, []).append((move.workload_id, tag, values))
    return kinds


def _write(moves: Sequence[tuple[Move, str]], at: datetime) -> set[int]:
    """One statement per kind of change; returns the ids of the rows written."""
    written: set[int] = set()
    for rows in _kinds(moves, at).values():
        written |= _write_kind(rows)
    return written


def _same(values: list[Any]) -> bool:
    first = values[0]
    return all(type(v) is type(first) and v == first for v in values[1:])


def _assignments(
    rows: list[tuple[int, Any, dict[str, Any]]],
) -> tuple[list[str], list[Any], list[str], list[Field]]:
    """A kind's SET of the values every row shares (SQL, parameters), and the names and
    fields of those that come row by row."""
    names = sorted(rows[0][2])
    constant = [n for n in names if _same([r[2][n] for r in rows])]
    per_row = [n for n in names if n not in constant]
    query = UpdateQuery(Workload)
    compiler = query.get_compiler(connection=connection)
    sets: list[str] = []
    set_params: list[Any] = []
    for name in constant:
        f = _column(name)
        value = rows[0][2][name]
        column = connection.ops.quote_name(f.column)
        if isinstance(value, BaseExpression):
            resolved = value.resolve_expression(query, allow_joins=False, for_save=True)
            sql, params = compiler.compile(resolved)
            sets.append(f"{column} = {sql}")
            set_params.extend(params)
        else:
            sets.append(f"{column} = %s")
            set_params.append(f.get_db_prep_save(value, connection))
    return sets, set_params, per_row, [_column(n) for n in per_row]


def _write_kind(rows: list[tuple[int, str, dict[str, Any]]]) -> set[int]:
    table = connection.ops.quote_name(Workload._meta.db_table)
    sets, set_params, per_row, fields = _assignments(rows)

    def row_params(row: tuple[int, str, dict[str, Any]]) -> list[Any]:
        return [
            f.get_db_prep_save(row[2][n], connection) for n, f in zip(per_row, fields, strict=True)
        ]

    if connection.vendor == "postgresql":
        return _write_postgresql(table, sets, set_params, fields, rows, row_params)
    return _write_each(table, sets, set_params, fields, rows, row_params)


def _column(name: str) -> Field:
    """The concrete field behind ``name`` (a field's name or attname, "preempted_by_id")."""
    f = Workload._meta.get_field(name)
    if not isinstance(f, Field) or not f.concrete:
        raise ValueError(f"{name!r} is not a column of a workload.")
    return f


def _cast(f: Field) -> str:
    """The type of a VALUES column (varchar without a length: a cast would cut silently)."""
    if f.get_internal_type() == "CharField":
        return "varchar"
    return str(f.db_type(connection))


def _write_postgresql(
    table: str,
    sets: list[str],
    set_params: list[Any],
    fields: list[Field],
    rows: list[tuple[int, str, dict[str, Any]]],
    row_params: Any,
) -> set[int]:
    """``UPDATE ... FROM (VALUES ...)``: one statement for the kind (chunked past
    MAX_PARAMS), conditional on each row's phase, returning the ids written."""
    q = connection.ops.quote_name
    columns = ["id", "from_phase", *(f"v_{f.column}" for f in fields)]
    casts = ["bigint", "varchar", *(_cast(f) for f in fields)]
    tuple_sql = "(" + ", ".join(f"%s::{cast}" for cast in casts) + ")"
    assign = sets + [f"{q(f.column)} = v.{q('v_' + f.column)}" for f in fields]
    written: set[int] = set()
    step = max(1, MAX_PARAMS // len(columns))
    with connection.cursor() as cursor:
        for start in range(0, len(rows), step):
            chunk = rows[start : start + step]
            params = list(set_params)
            for row in chunk:
                params += [row[0], row[1], *row_params(row)]
            # Identifiers from the model's meta, quoted; every value is a parameter.
            where = (
                f"{table}.{q('id')} = v.{q('id')} AND {table}.{q('phase')} = v.{q('from_phase')}"
            )
            sql = " ".join(
                (
                    f"UPDATE {table} SET {', '.join(assign)}",  # noqa: S608
                    f"FROM (VALUES {', '.join([tuple_sql] * len(chunk))})",
                    f"AS v({', '.join(q(c) for c in columns)})",
                    f"WHERE {where} RETURNING {table}.{q('id')}",
                )
            )
            cursor.execute(sql, params)
            written.update(int(wid) for (wid,) in cursor.fetchall())
    return written


def _write_each(
    table: str,
    sets: list[str],
    set_params: list[Any],
    fields: list[Field],
    rows: list[tuple[int, str, dict[str, Any]]],
    row_params: Any,
) -> set[int]:
    """Databases without row locks or ``UPDATE ... FROM`` (SQLite): one ``executemany``
    of the conditional update. SQLite lets one writer at a time in, so the rows read
    cannot change before this write; should the count fall short all the same, the
    rows are read again to tell the written from the conflicting."""
    q = connection.ops.quote_name
    assign = sets + [f"{q(f.column)} = %s" for f in fields]
    sql = f"UPDATE {table} SET {', '.join(assign)} WHERE {q('id')} = %s AND {q('phase')} = %s"  # noqa: S608
    params = [[*set_params, *row_params(row), row[0], row[1]] for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
        count = cursor.rowcount
    ids = {row[0] for row in rows}
    if count == len(rows):
        return ids
    # Which rows did it write? Those now in their target phase and stamped with this
    # write's time (every row of a call shares it).
    now = {
        wid: (phase, updated_at)
        for wid, phase, updated_at in Workload.objects.filter(id__in=ids).values_list(
            "id", "phase", "updated_at"
        )
    }
    return {row[0] for row in rows if now.get(row[0]) == (row[2]["phase"], row[2]["updated_at"])}

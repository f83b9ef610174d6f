"""New workloads, their timeline and their audit records in one PostgreSQL statement.

The sync registers the jobs it finds in batches. Django's ``bulk_create`` made three
inserts of it and, per row, a model instance, every field's preparation, and arrays
that psycopg's client-side binding quotes element by element: about 0.6-0.8 ms of CPU
a job. Here the rows travel as one JSON document (one parameter, as the annotations'
write does, ``queueing.state.annotate``), read by ``jsonb_to_recordset``; values that
every row shares are single parameters. Data-modifying CTEs write the timeline and the
audit records from the inserted rows in the same statement.

Every column of the model is written: the given value, else the field's default, so a
field added to the model later is covered. All or nothing, as ``bulk_create`` was: a
collision with a live workload (``workload_unique_active_object``) raises
IntegrityError and inserts nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Field, Model

from queueing import trees
from queueing.actions.base import Actor, snapshot_of
from queueing.lease import no_flush_condition
from queueing.models import AuditEvent, Workload, WorkloadEvent

# Always one value per row: the audit records find their workload by these.
_KEYS = ("kind", "namespace", "name")


class Inserted(NamedTuple):
    """What ``insert_workloads`` wrote, for ``publish``: ``(tenant id, queue id, workload
    id)`` of each row, and their trees as ``trees.roots_and_deciding`` answers."""

    changes: list[tuple[int, int, int]]
    trees: tuple[dict[str, list[int]], set[str]]


def insert_workloads(actor: Actor, rows: Sequence[Mapping[str, Any]], now: datetime) -> Inserted:
    """Insert workloads with the given field values (by field name, relations as model
    instances or ids), their first timeline step and audit records; returns what was
    written and the trees of the new rows (named by the same statement)."""
    if not rows:
        return Inserted([], ({}, set()))
    q = connection.ops.quote_name
    fields = [f for f in Workload._meta.concrete_fields if not f.primary_key]
    per_row: list[Field] = []
    constants: list[tuple[Field, Any]] = []
    columns: dict[str, list[Any]] = {}
    for f in fields:
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            values = [now] * len(rows)
        elif f.name in rows[0]:
            values = [_plain(f, row[f.name]) for row in rows]
        else:
            values = [_plain(f, f.get_default())] * len(rows)
        if f.name not in _KEYS and _same(values):
            constants.append((f, values[0]))
        else:
            per_row.append(f)
            columns[f.attname] = values
    shared = {f.attname: value for f, value in constants}
    documents = []
    for i in range(len(rows)):
        document = {f.attname: columns[f.attname][i] for f in per_row}
        saved = _Saved({**shared, **document})
        document = {name: _json(value) for name, value in document.items()}
        document["kq_repr"] = str(saved)[:300]
        document["kq_after"] = snapshot_of(saved)  # type: ignore[arg-type]
        documents.append(document)

    record = ", ".join(
        [*(f"{q(f.attname)} {_cast(f)}" for f in per_row), "kq_repr text", "kq_after jsonb"]
    )
    insert_columns = [*(f.column for f in per_row), *(f.column for f, _ in constants)]
    select = [
        *(f"v.{q(f.attname)}" for f in per_row),
        *(f"%s::{_cast(f)}" for f, _ in constants),
    ]
    constant_params = [f.get_db_prep_save(value, connection) for f, value in constants]
    workload, event, audit = (
        q(Workload._meta.db_table),
        q(WorkloadEvent._meta.db_table),
        q(AuditEvent._meta.db_table),
    )
    join = " AND ".join(f"v.{q(k)} = w.{q(k)}" for k in _KEYS)
    sql = f"""
        WITH RECURSIVE v AS (
            SELECT * FROM jsonb_to_recordset(%s::jsonb) AS v({record})
            WHERE {no_flush_condition()}
        ),
        w AS (
            INSERT INTO {workload} ({", ".join(q(c) for c in insert_columns)})
            SELECT {", ".join(select)} FROM v
            RETURNING {q("id")}, {q("tenant_id")}, {q("queue_id")}, {q("phase")},
                {q("quota_id")}, {", ".join(q(k) for k in _KEYS)}
        ),
        e AS (
            INSERT INTO {event} ({q("workload_id")}, {q("at")}, {q("from_phase")},
                {q("to_phase")}, {q("reason")}, {q("message")})
            SELECT w.{q("id")}, %s, '', w.{q("phase")}, 'Submitted', '' FROM w
        ),
        a AS (
            INSERT INTO {audit} ({q("at")}, {q("actor_id")}, {q("actor_name")}, {q("source")},
                {q("action")}, {q("object_type")}, {q("object_id")}, {q("object_repr")},
                {q("tenant_id")}, {q("after")})
            SELECT %s, %s, %s, %s, 'workload.submit', %s, w.{q("id")}::text, v.kq_repr,
                w.{q("tenant_id")}, v.kq_after
            FROM w JOIN v ON {join}
        ),
        {trees.roots_cte(f"SELECT {q('quota_id')} FROM w")}
        SELECT w.{q("tenant_id")}, w.{q("queue_id")}, w.{q("id")}, r.root, w.{q("phase")}
        FROM w LEFT JOIN kq_roots r ON r.quota_id = w.{q("quota_id")}
    """  # noqa: S608 - identifiers from the models' meta, quoted; every value a parameter
    params = [
        json.dumps(documents, separators=(",", ":")),
        *constant_params,
        now,
        now,
        actor.user.pk if actor.user is not None else None,
        actor.name,
        actor.source,
        Workload._meta.model_name or "",
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    return Inserted(
        [(int(t), int(qid), int(wid)) for t, qid, wid, _, _ in fetched],
        trees.trees_of((wid, root, phase) for _, _, wid, root, phase in fetched),
    )


def _plain(f: Field, value: Any) -> Any:
    """A relation's id for a related object; the value itself otherwise."""
    if f.is_relation and isinstance(value, Model):
        return value.pk
    return value


def _same(values: list[Any]) -> bool:
    first = values[0]
    return all(type(v) is type(first) and v == first for v in values[1:])


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _cast(f: Field) -> str:
    """The type of a record column (varchar without a length: a cast would cut silently;
    the insert's own assignment checks the length)."""
    if f.get_internal_type() in ("CharField", "TextField"):
        return "varchar"
    return str(f.db_type(connection))


class _Saved:
    """A row as its model instance would show it to ``str`` and ``snapshot_of`` (which
    read attributes only), without a model instance's cost."""

    _meta = Workload._meta
    __str__ = Workload.__str__

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)

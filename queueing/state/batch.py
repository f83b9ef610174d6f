"""Several statements in one round trip to PostgreSQL.

A woken cycle's statements are small; on a busy machine what each costs is mostly its
round trip -- a wake-up of the database's backend and of the worker (issue 10,
docs/realtime.md §4). ``run`` sends statements that go together as one message of
PostgreSQL's simple query protocol (Django's psycopg cursor binds the parameters on the
client, so a string of statements with parameters is one ``execute``): the server runs
them one after the other in the caller's transaction, **each with its own snapshot**
(READ COMMITTED), and answers them together. A statement that waits for a lock therefore
lets the statements after it see what was committed while it waited -- which one
statement made of CTEs would not (its snapshot is taken before the wait).

An error in any statement fails the whole ``run`` (the server skips the rest of the
message), raised as the one statement's error would be: the caller's transaction rolls
back as it would have. Elsewhere (SQLite runs in the process: no round trip to save)
and on a server-side-binding cursor, the statements run one ``execute`` each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, models
from django.db.models.sql import InsertQuery

from queueing import trace


@dataclass(frozen=True, slots=True)
class Statement:
    sql: str
    params: Sequence[Any] = ()


Rows = list[tuple[Any, ...]]


def run(statements: Sequence[Statement]) -> list[Rows | None]:
    """Run ``statements`` in order in one round trip where the database allows it; each
    one's rows (None for a statement that returns none, e.g. an UPDATE without
    RETURNING)."""
    if not statements:
        return []
    with connection.cursor() as cursor:
        if len(statements) == 1 or not _one_message(cursor):
            out: list[Rows | None] = []
            for statement in statements:
                cursor.execute(statement.sql, list(statement.params))
                out.append(_rows(cursor))
            return out
        cursor.execute(
            "; ".join(s.sql.rstrip().rstrip(";") for s in statements),
            [p for s in statements for p in s.params],
        )
        out = [_rows(cursor)]
        while cursor.nextset():
            out.append(_rows(cursor))
        if len(out) != len(statements):  # a statement that was not one
            raise RuntimeError(f"{len(statements)} statements sent, {len(out)} answered")
        trace.joined(len(statements) - 1)
        return out


def _one_message(cursor: Any) -> bool:
    """Whether the cursor binds on the client (psycopg's ClientCursor, Django's default),
    so that statements with parameters can go as one simple-protocol message."""
    if connection.vendor != "postgresql":
        return False
    import psycopg

    return isinstance(getattr(cursor, "cursor", None), psycopg.ClientCursor)


def _rows(cursor: Any) -> Rows | None:
    return None if cursor.description is None else [tuple(row) for row in cursor.fetchall()]


def insert(obj: models.Model) -> Statement:
    """The INSERT of a new model instance, returning its primary key (what
    ``obj.save()`` sends on PostgreSQL), for ``run`` to send with others; the caller
    sets ``obj.pk`` from the statement's row."""
    meta = obj._meta
    if obj.pk is not None or meta.auto_field is None:
        raise ValueError("insert() makes a new row with a generated primary key")
    fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field and not f.generated]
    query = InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    compiler = query.get_compiler(connection=connection)
    compiler.returning_fields = [meta.pk]
    ((sql, params),) = compiler.as_sql()
    return Statement(sql, params)

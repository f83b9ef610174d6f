"""Node capacity is one truth across quota trees (docs/realtime.md).

Each tree's cycle runs under its own lease, so two trees may be cycled at the same
moment by two workers, each from a snapshot that counted what the *other* trees held on
the nodes when it was read. Between that read and the apply, another tree may have
placed work on the same nodes. ``check`` closes that window at apply time:

1. the applying transaction takes the placement lock (one row, updated first: on
   PostgreSQL a row lock held to the commit, on SQLite the database's write lock, which
   IMMEDIATE transactions take anyway), so applies that place work are serialised while
   snapshots and engines still run in parallel;
2. under it, it reads what the other trees hold now, per node;
3. where they hold more than the snapshot counted, the admissions are replayed against
   the nodes in the engine's order, and an admission that no longer fits is withdrawn
   (it stays waiting; the woken cycle that follows tries again with the truth).

Cost: two statements per apply that admits (the lock, which on PostgreSQL also checks
the cycle's fence, and what the other trees hold), in one round trip on PostgreSQL
(``lock_and_read``: one message of two statements, ``state.batch``; each statement of a
READ COMMITTED transaction takes its own snapshot when it starts, and the server starts
the read only once the lock is granted, so the read sees every apply committed before),
and a lock held from that read to the commit. The alternative designs are weighed in docs/realtime.md.

The read is skipped when nothing can have grown: each taking of the lock raises its
token by one, and the only write that gives a workload room on a node is an admission,
made under the lock. A pass that read every tree's holdings with the token (``PassReads``)
and added its own trees' admissions as they committed knows the holdings as of its last
taking; when the lock's next token is the one after it, nobody else took it and the read
would find nothing new (``lock_and_read``'s ``unchanged_since``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from queueing import faults
from queueing.choices import HOLDING_PHASES
from queueing.engine.types import Admission, Snapshot
from queueing.lease import DEFER_FLUSH, Lease, LeaseLost, check, still_held
from queueing.models import CycleLease, Workload
from queueing.state import batch

LOCK_NAME = "placement"

Usage = dict[str, dict[str, int]]  # node -> resource -> amount


def lock(fence: Lease | None = None, *, defer_flush: bool = False) -> int:
    """Inside the apply's transaction: wait for (and hold) the placement lock; the lock's
    token, which each taking raises by one (``unchanged_since``). One statement, which
    makes the lock's row the first time (an upsert: a racing first insert waits for the
    other's and then updates it, nothing raises into the caller's transaction).

    ``fence``: the cycle's lease, checked first (``lease.check``: its row locked, LeaseLost
    unless still ours); on PostgreSQL in the same statement as the lock."""
    if fence is not None and connection.vendor != "postgresql":
        check(fence)
        fence = None
    (rows,) = batch.run([_lock_statement(fence, defer_flush=defer_flush)])
    return _checked(fence, rows)


def lock_and_read(
    quota_ids: Iterable[int],
    fence: Lease | None = None,
    *,
    defer_flush: bool = False,
    unchanged_since: int | None = None,
) -> tuple[int, Usage | None]:
    """The placement lock (``lock``), then what the other trees hold under it
    (``held_elsewhere``): on PostgreSQL the two statements in one round trip
    (``state.batch``). The read is the second statement of the message, so the server
    starts it, with its own snapshot, only once the lock is granted: it sees every apply
    committed before. A lost fence raises LeaseLost as ``lock`` does (the read was
    harmless; the caller's transaction rolls back the lock). Returns the lock's token and
    what was read.

    ``unchanged_since``: the token of the lock after which the caller's view of the other
    trees' holdings was read (or to which it added its own admissions: ``PassReads``).
    Other trees' holdings on the nodes grow only under this lock (an admission is the one
    write that gives a workload room on a node), so when the lock's token is the next one
    -- nobody took it since -- nothing grew and nothing is read: None. On PostgreSQL the
    read is still sent, gated on the token (a one-time filter the server evaluates before
    any row is read); the read under the lock was the tail's costliest statement after a
    burst (every holding row's index entries, dead ones included, on a table not vacuumed
    yet)."""
    if connection.vendor != "postgresql":
        token = lock(fence, defer_flush=defer_flush)
        faults.reach("placement.locked")
        if unchanged_since is not None and token == unchanged_since + 1:
            return token, None
        return token, held_elsewhere(quota_ids)
    sql, params = _elsewhere_query(quota_ids).query.get_compiler(connection.alias).as_sql()
    if unchanged_since is not None:
        table = connection.ops.quote_name(CycleLease._meta.db_table)
        q = connection.ops.quote_name
        # Identifiers from the models' meta, quoted; values are parameters.
        sql = (
            f"SELECT * FROM ({sql}) held WHERE "  # noqa: S608
            f"(SELECT {q('token')} FROM {table} WHERE {q('name')} = %s) <> %s"
        )
        params = (*params, LOCK_NAME, unchanged_since + 1)
    locked, held = batch.run(
        [_lock_statement(fence, defer_flush=defer_flush), batch.Statement(sql, params)]
    )
    token = _checked(fence, locked)
    faults.reach("placement.locked")
    if unchanged_since is not None and token == unchanged_since + 1:
        return token, None
    usage: Usage = defaultdict(dict)
    for (value,) in held or []:
        _add_stored(usage, value)
    return token, usage


def _lock_statement(fence: Lease | None, *, defer_flush: bool) -> batch.Statement:
    """The lock's statement, answering the lock's new token: the upsert of its row, with
    the fence's row locked and read in the same statement when there is a fence
    (PostgreSQL only)."""
    table = connection.ops.quote_name(CycleLease._meta.db_table)
    q = connection.ops.quote_name
    upsert = (
        f"INSERT INTO {table} ({q('name')}, {q('holder')}, {q('token')}, {q('expires_at')}) "  # noqa: S608
        f"VALUES (%s, '', 1, NULL) ON CONFLICT ({q('name')}) "
        f"DO UPDATE SET {q('token')} = {table}.{q('token')} + 1 RETURNING {q('token')}"
    )
    defer = f", {DEFER_FLUSH}" if defer_flush else ""
    if fence is None:
        # Identifiers from the model's meta, quoted; the name is a parameter.
        if defer:
            return batch.Statement(
                f"WITH placed AS ({upsert}) SELECT {q('token')}{defer} FROM placed",  # noqa: S608
                [LOCK_NAME],
            )
        return batch.Statement(upsert, [LOCK_NAME])
    # The fence's row locked and read, and the lock taken, in one statement (the upsert
    # runs whatever the read finds; a lost lease rolls it back with the rest).
    return batch.Statement(
        f"WITH placed AS ({upsert}) "  # noqa: S608
        f"SELECT {q('token')}, {q('holder')}, {q('expires_at')}, "
        f"(SELECT {q('token')} FROM placed){defer} "
        f"FROM {table} WHERE {q('name')} = %s FOR UPDATE",
        [LOCK_NAME, fence.name],
    )


def _checked(fence: Lease | None, rows: batch.Rows | None) -> int:
    """The lock's new token, from its statement's rows; LeaseLost unless the fence's row,
    as the lock's statement read it, is still ours."""
    if fence is None:
        if not rows:
            raise RuntimeError("the placement lock's statement answered no token")
        return int(rows[0][0])
    if not rows:
        raise LeaseLost(f"the lease {fence.name!r} #{fence.token} is no longer held")
    row = rows[0]
    still_held(fence, row[0], row[1], row[2])
    return int(row[3])


def _elsewhere_query(quota_ids: Iterable[int]) -> QuerySet[Workload, Any]:
    ids = [int(i) for i in quota_ids]
    return (
        Workload.objects.filter(phase__in=HOLDING_PHASES)
        .exclude(quota_id__in=ids)
        .order_by()  # (not the model's queue order: a sort of every row for nothing)
        .values_list("assignment", flat=True)
    )


def held_elsewhere(quota_ids: Iterable[int]) -> Usage:
    """What workloads of other trees (not of ``quota_ids``) hold on each node now.

    Decoded here, not summed by PostgreSQL (``jsonb_each`` over the assignments): the
    database's sum took the same process CPU and 20 ms more of each cycle's wall at
    ``world_cycle_14k`` (38-40 ms against 56-66 ms, pairs back to back)."""
    usage: Usage = defaultdict(dict)
    for assignment in _elsewhere_query(quota_ids):
        if isinstance(assignment, dict):
            _add(usage, assignment)
    return usage


def held_by_quota() -> tuple[dict[int, Usage], int]:
    """What the holding workloads of every tree hold on each node, per quota id: one read
    that the cycles of one pass share (``snapshot.PassReads``), where each tree's
    snapshot read the other trees' holdings again (``held_elsewhere``). With the
    placement lock's token as of the same read (0 before its first taking): the
    holdings read cannot have grown while the lock's token stays that
    (``lock_and_read``'s ``unchanged_since``)."""
    out: dict[int, Usage] = {}
    table = connection.ops.quote_name(Workload._meta.db_table)
    leases = connection.ops.quote_name(CycleLease._meta.db_table)
    q = connection.ops.quote_name
    phases = [str(phase) for phase in HOLDING_PHASES]
    marks = ", ".join(["%s"] * len(phases))
    with connection.cursor() as cursor:
        # One statement, one snapshot: the token and the rows as of the same moment (a
        # row of NULLs when nothing holds). Identifiers from the models' meta, quoted.
        cursor.execute(
            f"SELECT COALESCE((SELECT {q('token')} FROM {leases} WHERE {q('name')} = %s), 0), "  # noqa: S608
            f"w.{q('quota_id')}, w.{q('assignment')} FROM (SELECT 1) one LEFT JOIN {table} w "
            f"ON w.{q('phase')} IN ({marks})",
            [LOCK_NAME, *phases],
        )
        rows = cursor.fetchall()
        token = rows[0][0] if rows else 0
        for _token, quota_id, value in rows:
            if quota_id is not None:
                _add_stored(out.setdefault(quota_id, defaultdict(dict)), value)
    return out, int(token)


def _add_stored(usage: Usage, value: Any) -> None:
    """``_add`` of an assignment as a raw statement returns it (the field decodes it)."""
    assignment = Workload._meta.get_field("assignment").from_db_value(value, None, connection)
    if isinstance(assignment, dict):
        _add(usage, assignment)


def _add(usage: Usage, assignment: Mapping[str, Mapping[str, int]]) -> None:
    for node, held in assignment.items():
        bucket = usage[node]
        for resource, amount in held.items():
            bucket[resource] = bucket.get(resource, 0) + int(amount)


def grew(before: Mapping[str, Mapping[str, int]], now: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether other trees hold more of anything on any node than the snapshot counted."""
    for node, held in now.items():
        seen = before.get(node, {})
        if any(amount > seen.get(resource, 0) for resource, amount in held.items()):
            return True
    return False


def withdrawn(
    admissions: Sequence[Admission],
    snapshot: Snapshot,
    before: Mapping[str, Mapping[str, int]],
    now: Mapping[str, Mapping[str, int]],
) -> set[int]:
    """The admissions that no longer fit once other trees' growth is counted: replayed in
    the engine's order against each node's room (allocatable minus what the snapshot
    reserved, what this tree held, and what the other trees added since)."""
    room: Usage = {}
    for node in snapshot.nodes:
        free = {r: int(node.allocatable.raw.get(r, 0)) for r in node.allocatable.raw}
        for resource, amount in node.reserved.raw.items():
            free[resource] = free.get(resource, 0) - int(amount)
        added = now.get(node.name, {})
        seen = before.get(node.name, {})
        for resource, amount in added.items():
            free[resource] = free.get(resource, 0) - max(0, amount - seen.get(resource, 0))
        room[node.name] = free
    for workload in snapshot.workloads:
        if workload.phase in HOLDING_PHASES:
            for node_name, held in workload.assignment.items():
                bucket = room.setdefault(node_name, {})
                for resource, amount in held.raw.items():
                    bucket[resource] = bucket.get(resource, 0) - int(amount)
    out: set[int] = set()
    for admission in admissions:
        fits = all(
            room.get(node_name, {}).get(resource, 0) >= int(amount)
            for node_name, held in admission.assignment.items()
            for resource, amount in held.raw.items()
            if int(amount) > 0
        )
        if not fits:
            out.add(admission.workload_id)
            continue
        for node_name, held in admission.assignment.items():
            bucket = room.setdefault(node_name, {})
            for resource, amount in held.raw.items():
                bucket[resource] = bucket.get(resource, 0) - int(amount)
    return out

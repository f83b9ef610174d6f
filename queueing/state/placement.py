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
(``lock_and_read``: psycopg's pipeline mode sends both before waiting for either; each
statement of a READ COMMITTED transaction takes its own snapshot when it starts, and the
server starts the read only once the lock is granted, so the read sees every apply
committed before), and a lock held from that read to the commit. The alternative designs are weighed in docs/realtime.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from django.db import connection

from queueing import faults, trace
from queueing.choices import HOLDING_PHASES
from queueing.engine.types import Admission, Snapshot
from queueing.lease import DEFER_FLUSH, Lease, LeaseLost, check, still_held
from queueing.models import CycleLease, Workload

LOCK_NAME = "placement"

Usage = dict[str, dict[str, int]]  # node -> resource -> amount


def lock(fence: Lease | None = None, *, defer_flush: bool = False) -> None:
    """See ``_lock``: the lock taken, the fence checked."""
    _lock(fence, defer_flush=defer_flush)()


def lock_and_read(
    quota_ids: Iterable[int], fence: Lease | None = None, *, defer_flush: bool = False
) -> Usage:
    """The placement lock (``lock``), then what the other trees hold under it
    (``held_elsewhere``): on PostgreSQL both statements in one round trip (psycopg's
    pipeline mode). The read is sent after the lock's statement in the same session, so
    the server runs it only once the lock is granted, with a snapshot taken then; a lost
    fence or a failed lock raises as ``lock`` does (the read was harmless). Elsewhere the
    two one after the other (SQLite runs in the process: no round trip to save)."""
    if connection.vendor != "postgresql":
        lock(fence, defer_flush=defer_flush)
        faults.reach("placement.locked")
        return held_elsewhere(quota_ids)
    connection.ensure_connection()
    with connection.connection.pipeline():
        finish = _lock(fence, defer_flush=defer_flush)
        # The ORM's read sends its statement and waits for the results: the pipeline's
        # sync point, which sends the lock's statement and this one in one round trip.
        usage = held_elsewhere(quota_ids)
        finish()
    trace.joined()  # the read went in the lock's round trip
    faults.reach("placement.locked")
    return usage


def _lock(fence: Lease | None = None, *, defer_flush: bool = False) -> Callable[[], None]:
    """Inside the apply's transaction, send the statement that waits for (and holds) the
    placement lock; the function returned reads its outcome. One
    statement, which makes the lock's row the first time (an upsert: a racing first
    insert waits for the other's and then updates it, nothing raises into the caller's
    transaction).

    ``fence``: the cycle's lease, checked first (``lease.check``: its row locked, LeaseLost
    unless still ours); on PostgreSQL in the same statement as the lock."""
    table = connection.ops.quote_name(CycleLease._meta.db_table)
    q = connection.ops.quote_name
    upsert = (
        f"INSERT INTO {table} ({q('name')}, {q('holder')}, {q('token')}, {q('expires_at')}) "  # noqa: S608
        f"VALUES (%s, '', 1, NULL) ON CONFLICT ({q('name')}) "
        f"DO UPDATE SET {q('token')} = {table}.{q('token')} + 1"
    )
    if fence is not None and connection.vendor != "postgresql":
        check(fence)
        fence = None
    defer = f", {DEFER_FLUSH}" if defer_flush else ""
    # The statement is sent here; what it returns is read by the function returned (in
    # a pipeline, once a later statement's results made the round trip).
    cursor = connection.cursor()
    if fence is None:
        # Identifiers from the model's meta, quoted; the name is a parameter.
        if defer:
            cursor.execute(f"WITH placed AS ({upsert} RETURNING 1) SELECT 1{defer}", [LOCK_NAME])
        else:
            cursor.execute(upsert, [LOCK_NAME])

        def done() -> None:
            if defer:
                cursor.fetchone()
            cursor.close()

        return done
    held = fence
    # The fence's row locked and read, and the lock taken, in one statement (the upsert
    # runs whatever the read finds; a lost lease rolls it back with the rest).
    cursor.execute(
        f"WITH placed AS ({upsert} RETURNING 1) "  # noqa: S608
        f"SELECT {q('token')}, {q('holder')}, {q('expires_at')}, "
        f"(SELECT count(*) FROM placed){defer} "
        f"FROM {table} WHERE {q('name')} = %s FOR UPDATE",
        [LOCK_NAME, fence.name],
    )

    def checked() -> None:
        try:
            row = cursor.fetchone()
        finally:
            cursor.close()
        if row is None:
            raise LeaseLost(f"the lease {held.name!r} #{held.token} is no longer held")
        still_held(held, row[0], row[1], row[2])

    return checked


def held_elsewhere(quota_ids: Iterable[int]) -> Usage:
    """What workloads of other trees (not of ``quota_ids``) hold on each node now.

    Decoded here, not summed by PostgreSQL (``jsonb_each`` over the assignments): the
    database's sum took the same process CPU and 20 ms more of each cycle's wall at
    ``world_cycle_14k`` (38-40 ms against 56-66 ms, pairs back to back)."""
    ids = [int(i) for i in quota_ids]
    usage: Usage = defaultdict(dict)
    for assignment in (
        Workload.objects.filter(phase__in=HOLDING_PHASES)
        .exclude(quota_id__in=ids)
        .values_list("assignment", flat=True)
    ):
        if isinstance(assignment, dict):
            _add(usage, assignment)
    return usage


def held_by_quota() -> dict[int, Usage]:
    """What the holding workloads of every tree hold on each node, per quota id: one read
    that the cycles of one pass share (``snapshot.PassReads``), where each tree's
    snapshot read the other trees' holdings again (``held_elsewhere``)."""
    out: dict[int, Usage] = {}
    for quota_id, assignment in Workload.objects.filter(phase__in=HOLDING_PHASES).values_list(
        "quota_id", "assignment"
    ):
        if isinstance(assignment, dict):
            _add(out.setdefault(quota_id, defaultdict(dict)), assignment)
    return out


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

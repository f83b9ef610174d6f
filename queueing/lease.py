"""The cycle's singleton lease per quota-tree root, with a fencing token.

A database row per root: taking it is a conditional update that succeeds only when the
lease is free, expired, or already ours, and every take increments the token. apply()
re-checks the token inside its own transaction (row-locked), so a worker that stalled
past its expiry and lost the lease cannot write decisions computed from a stale view.
Works the same on PostgreSQL and SQLite; no extra service is needed.

A pass (one task cycling several woken trees in turn: admission._cycle_roots) takes the
leases of all its trees at once (``acquire_many``: one statement on PostgreSQL) and gives
back those it is done with at once (``release_many``), each with its own token exactly as
``acquire`` would give it: apply's fence and the cluster writes' ``Fence`` are per tree as
before. A worker killed mid-pass leaves all the pass's leases held until their TTL
(``KQ_CYCLE_LEASE_S``), not just the one of the tree it was cycling: safe (nobody else
cycles those trees until then; beat's tick and the busy retries pick them up after),
it only delays them (docs/realtime.md §4).

Cluster writes happen outside the database, after the commit, so the token cannot guard
them. ``Fence`` does instead: before each write it makes sure the lease will outlive the
write (a write gives up after its retry budget and one request timeout), renewing it
while it is still ours, and raises LeaseLost otherwise. A worker that stalled past its
lease therefore never unsuspends a job another worker has decided about since.

Takes and releases commit without waiting for the WAL's flush on PostgreSQL
(``_NO_FLUSH``: ``synchronous_commit`` off for that statement's own transaction, outside
any atomic block): a flush costs a disk sync (~3 ms on the bench's machine, four per
woken sync and its pass). Crash safety holds because PostgreSQL flushes its WAL in
order: nothing outside the database follows from a take before a commit that flushes --
a cycle's apply, or the fence's first write before a cluster call (``FlushingFence``) --
and that flush makes the take before it durable too. A take or release lost to a crash
of the *database* (its last ~0.6 s of such commits) only delays: the lease looks free,
or held until its TTL, after the restart, and the holder's next statement fails on its
broken connection. ``renew`` (the fence's, before a cluster write) still flushes.

The same goes for what a cycle or a sync writes when only the database depends on it
until the fence's flush: a cycle whose cluster calls run in the background commits its
apply with ``DEFER_FLUSH`` in its fence's statement and hands them a ``FlushingFence``; the sync writes its
transitions and registrations ``without_flush`` and repairs through a ``FlushingFence``.
The main thread goes on meanwhile; no cluster call is made for a decision a crash of the
database could still take back.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from queueing.models import CycleLease

# A condition true for every row it is evaluated on, which turns ``synchronous_commit`` off
# for the rest of the statement's transaction (``set_config``'s third argument). A volatile
# function with no column in it is a per-row filter, so it runs for every row the
# statement writes; a statement that writes no row writes no WAL to flush.
_NO_FLUSH = "set_config('synchronous_commit', 'off', true) IS NOT NULL"


def can_defer_flush() -> bool:
    """Whether the transaction this runs in can commit without waiting for the WAL's
    flush (``DEFER_FLUSH`` in one of its statements): on PostgreSQL, in a transaction of
    its own (not in a block nested in a caller's, whose commit is its author's). The
    caller makes it durable before anything outside the database follows from it
    (``FlushingFence``)."""
    return connection.vendor == "postgresql" and len(connection.atomic_blocks) == 1


# A column for a SELECT: its transaction commits without waiting for the WAL's flush.
DEFER_FLUSH = "set_config('synchronous_commit', 'off', true)"


_flush_off: ContextVar[bool] = ContextVar("kq_flush_off", default=False)


@contextmanager
def without_flush() -> Iterator[None]:
    """The writes of this block that commit by themselves (autocommit, on PostgreSQL) and
    ask for it (``no_flush_condition`` in their statement) do not wait for the WAL's
    flush. The caller makes them durable before anything outside the database follows
    from them (``FlushingFence``)."""
    token = _flush_off.set(True)
    try:
        yield
    finally:
        _flush_off.reset(token)


def no_flush_condition() -> str:
    """A condition for the WHERE of a statement's rows: ``_NO_FLUSH`` inside
    ``without_flush`` on PostgreSQL in autocommit, else ``TRUE``."""
    if _flush_off.get() and connection.vendor == "postgresql" and not connection.in_atomic_block:
        return _NO_FLUSH
    return "TRUE"


def _no_flush() -> str:
    """`` AND <_NO_FLUSH>`` to add to a lease statement's WHERE on PostgreSQL in autocommit;
    empty inside an atomic block (the caller's transaction decides its own commit) and on
    other databases."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return ""
    return f" AND {_NO_FLUSH}"


class LeaseLost(Exception):
    """Another worker holds the lease now; drop what you were about to write."""


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    token: int
    expires_at: datetime


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def acquire(name: str, *, holder: str | None = None, ttl_s: float | None = None) -> Lease | None:
    """Take the lease of ``name`` if it is free or expired; None when someone holds it.

    One statement when the row exists (an UPDATE ... RETURNING the new token: atomic on
    its own, the conditional take and the token read at once); the row is created the
    first time a name is taken."""
    holder = holder or worker_id()
    ttl = timedelta(seconds=ttl_s if ttl_s is not None else settings.KQ_CYCLE_LEASE_S)
    now = timezone.now()
    token = _take(name, holder, now, now + ttl)
    if token is None:
        try:
            with transaction.atomic():
                _, created = CycleLease.objects.get_or_create(name=name)
        except IntegrityError:
            created = True  # created by a racing worker: try again
        if not created:
            return None  # there, and held
        token = _take(name, holder, now, now + ttl)
        if token is None:
            return None
    return Lease(name=name, holder=holder, token=token, expires_at=now + ttl)


def acquire_many(
    names: Sequence[str], *, holder: str | None = None, ttl_s: float | None = None
) -> dict[str, Lease]:
    """Take the leases of ``names`` that are free or expired (each as ``acquire`` would:
    its token incremented, a missing row made with token 1): name -> Lease, the names
    held by another left out.

    PostgreSQL: one statement -- the free rows locked and taken (``FOR UPDATE SKIP
    LOCKED``: a row another transaction holds locked is skipped, not waited for: that is
    another worker's apply under the lease, or its take or release of it, so the lease is
    held or about to be, and the busy retry comes back for it), the missing rows inserted
    (``ON CONFLICT DO NOTHING``: a racing worker's insert wins). SQLite (one writer at a
    time, no row locks): ``acquire`` for each."""
    holder = holder or worker_id()
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return {}
    if connection.vendor != "postgresql":
        taken = {name: acquire(name, holder=holder, ttl_s=ttl_s) for name in wanted}
        return {name: lease for name, lease in taken.items() if lease is not None}
    ttl = timedelta(seconds=ttl_s if ttl_s is not None else settings.KQ_CYCLE_LEASE_S)
    now = timezone.now()
    until = now + ttl
    q = connection.ops.quote_name
    table = q(CycleLease._meta.db_table)
    name, who, token, expires = q("name"), q("holder"), q("token"), q("expires_at")
    marks = ", ".join(["%s"] * len(wanted))
    values = ", ".join(["(%s)"] * len(wanted))
    sql = (
        # Identifiers from the model's meta, quoted; every value is a parameter.
        f"WITH free AS (SELECT {name} FROM {table} WHERE {name} IN ({marks}) "  # noqa: S608
        f"AND ({expires} IS NULL OR {expires} <= %s OR {who} = %s){_no_flush()} "
        "FOR UPDATE SKIP LOCKED), "
        f"taken AS (UPDATE {table} t SET {who} = %s, {token} = t.{token} + 1, {expires} = %s "
        f"FROM free WHERE t.{name} = free.{name} RETURNING t.{name}, t.{token}), "
        f"made AS (INSERT INTO {table} ({name}, {who}, {token}, {expires}) "
        f"SELECT v.name, %s, 1, %s FROM (VALUES {values}) AS v(name) "
        f"ON CONFLICT ({name}) DO NOTHING RETURNING {name}, {token}) "
        f"SELECT {name}, {token} FROM taken UNION ALL SELECT {name}, {token} FROM made"
    )
    to_db = connection.ops.adapt_datetimefield_value
    params = [*wanted, to_db(now), holder, holder, to_db(until), holder, to_db(until), *wanted]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return {
        str(row[0]): Lease(name=str(row[0]), holder=holder, token=int(row[1]), expires_at=until)
        for row in rows
    }


def _take(name: str, holder: str, now: datetime, until: datetime) -> int | None:
    """The conditional take: the new token, or None (held by another, or no row)."""
    table = CycleLease._meta.db_table
    to_db = connection.ops.adapt_datetimefield_value
    sql = (
        f"UPDATE {table} SET holder = %s, token = token + 1, expires_at = %s "  # noqa: S608
        "WHERE name = %s AND (expires_at IS NULL OR expires_at <= %s OR holder = %s)"
        f"{_no_flush()} RETURNING token"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [holder, to_db(until), name, to_db(now), holder])
        row = cursor.fetchone()
    return int(row[0]) if row is not None else None


def check(lease: Lease, *, defer_flush: bool = False) -> None:
    """Inside a transaction: lock the lease row and raise LeaseLost unless still ours.
    ``defer_flush`` (``can_defer_flush`` must hold): in the same statement, the
    transaction's commit will not wait for the WAL's flush (``DEFER_FLUSH``)."""
    if defer_flush:
        q = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(
                # Identifiers from the model's meta, quoted; the name is a parameter.
                f"SELECT {q('token')}, {q('holder')}, {q('expires_at')}, {DEFER_FLUSH} "  # noqa: S608
                f"FROM {q(CycleLease._meta.db_table)} WHERE {q('name')} = %s FOR UPDATE",
                [lease.name],
            )
            found = cursor.fetchone()
        if found is None:
            raise LeaseLost(f"the lease {lease.name!r} #{lease.token} is no longer held")
        still_held(lease, found[0], found[1], found[2])
        return
    row = (
        CycleLease.objects.select_for_update()
        .filter(name=lease.name)
        .values("token", "holder", "expires_at")
        .first()
    )
    if row is None:
        raise LeaseLost(f"the lease {lease.name!r} #{lease.token} is no longer held")
    still_held(lease, row["token"], row["holder"], row["expires_at"])


def still_held(lease: Lease, token: int, holder: str, expires_at: datetime | None) -> None:
    """Raise LeaseLost unless the lease row read (locked) as given is still ``lease``."""
    if (
        token != lease.token
        or holder != lease.holder
        or (expires_at is not None and expires_at <= timezone.now())
    ):
        raise LeaseLost(f"the lease {lease.name!r} #{lease.token} is no longer held")


def release(lease: Lease) -> None:
    release_many([lease])


def release_many(held: Iterable[Lease]) -> None:
    """``release`` of each of ``held``, in one statement (a pass's leases, at its end)."""
    chosen = list(held)
    if not chosen:
        return
    if connection.vendor != "postgresql":
        match = reduce(or_, (Q(name=h.name, token=h.token, holder=h.holder) for h in chosen))
        CycleLease.objects.filter(match).update(expires_at=None, holder="")
        return
    q = connection.ops.quote_name
    name, who, token, expires = q("name"), q("holder"), q("token"), q("expires_at")
    rows = ", ".join(["(%s, %s, %s)"] * len(chosen))
    sql = (
        # Identifiers from the model's meta, quoted; every value is a parameter.
        f"UPDATE {q(CycleLease._meta.db_table)} SET {expires} = NULL, {who} = '' "  # noqa: S608
        f"WHERE ({name}, {token}, {who}) IN ({rows}){_no_flush()}"
    )
    params = [value for h in chosen for value in (h.name, h.token, h.holder)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def keep(lease: Lease, *, ttl_s: float | None = None) -> Lease | None:
    """A lease taken ahead of its use (a pass's, ``acquire_many``), as its use starts:
    itself while at least half its TTL is left, else renewed (None: it was lost). So a
    tree cycled late in a long pass starts with as much time as one cycled alone would,
    give or take half a TTL, at no statement in the common case."""
    ttl = ttl_s if ttl_s is not None else settings.KQ_CYCLE_LEASE_S
    if (lease.expires_at - timezone.now()).total_seconds() >= ttl / 2:
        return lease
    return renew(lease, ttl_s=ttl_s)


def renew(lease: Lease, *, ttl_s: float | None = None) -> Lease | None:
    """Extend a lease that is still ours (a heartbeat); None when it was lost."""
    ttl = timedelta(seconds=ttl_s if ttl_s is not None else settings.KQ_CYCLE_LEASE_S)
    now = timezone.now()
    extended = CycleLease.objects.filter(
        name=lease.name, token=lease.token, holder=lease.holder, expires_at__gt=now
    ).update(expires_at=now + ttl)
    return replace(lease, expires_at=now + ttl) if extended == 1 else None


def write_margin() -> timedelta:
    """How long a cluster write may take once started: its retry budget plus one request."""
    return timedelta(seconds=settings.KQ_KUBE_RETRY_S + settings.KQ_KUBE_TIMEOUT_S)


class Fence:
    """Guards the cluster writes made on behalf of a lease (None: no lease, no guard)."""

    def __init__(self, lease: Lease | None) -> None:
        self.lease = lease

    def check(self) -> None:
        """Return when a write started now ends while the lease is still ours."""
        if self.lease is None:
            return
        if self.lease.expires_at - timezone.now() > write_margin():
            return
        renewed = renew(self.lease)
        if renewed is None:
            raise LeaseLost(
                f"the lease {self.lease.name!r} #{self.lease.token} expired; "
                "its remaining cluster writes are left to the next sync"
            )
        self.lease = renewed


class FlushingFence(Fence):
    """A ``Fence`` whose first check also makes every commit before it durable (after an
    apply committed with ``DEFER_FLUSH``): the lease's row written (its expiry unchanged)
    and committed with the flush, which flushes the WAL up to it -- the apply's commit
    included. Raises LeaseLost, as the fence does, when the lease is no longer ours (no
    call is made: the next sync repeats what is due). Inside a transaction (a test's, a
    caller's) it is a plain ``Fence``: nothing was deferred there."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(lease)
        self.flushed = False

    def check(self) -> None:
        if not self.flushed:
            lease = self.lease
            assert lease is not None
            if connection.in_atomic_block:
                # Nothing was deferred in here (``no_flush_condition``, ``DEFER_FLUSH``):
                # what came before commits with the caller's transaction. A fence, no more.
                self.flushed = True
                super().check()
                return
            touched = CycleLease.objects.filter(
                name=lease.name,
                token=lease.token,
                holder=lease.holder,
                expires_at__gt=timezone.now(),
            ).update(expires_at=F("expires_at"))
            if touched != 1:
                raise LeaseLost(
                    f"the lease {lease.name!r} #{lease.token} is no longer held; "
                    "its cluster writes are left to the next sync"
                )
            self.flushed = True
        super().check()

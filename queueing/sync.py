"""Reconcile the database with the cluster: the cluster's facts drive the phases.

Runs before every cycle. Every step is a conditional update or an idempotent cluster
call, so two workers syncing at once, or a worker dying half-way, leave nothing wrong
that the next sync does not put right:

- a new managed job becomes a Pending workload;
- Admitted + job running -> Running; job finished -> Succeeded / Failed;
- Admitted but the job is still suspended (the admit call was lost) -> admit again;
- Preempted + job suspended and idle -> Pending (Backoff after a timeout);
  Preempted but the job still runs (the suspend call was lost) -> suspend again;
- waiting but the job was unsuspended behind the queue's back -> suspend it;
- the job is gone -> Cancelled.

Database writes go in transactions of CHUNK workloads (one commit, one live
notification each); the cluster calls a chunk needs are made after its commit. New jobs
are registered with one insert per chunk.

With an adapter that may lag (the watch cache, docs/kubernetes.md), giving quota back
and cancelling are confirmed by a fresh read, and the syncs between full ones (at least
every ``KQ_FULL_SYNC_S``) look only at the jobs the adapter's journal says changed.

With ``KQ_MIRROR_QUEUEUNITS`` the phases are then shown in kube-queue QueueUnits.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import IntegrityError, NotSupportedError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from queueing import actions, compat, faults, kubequeue, kubesync, trace
from queueing.choices import ACTIVE_PHASES, Phase
from queueing.cluster import get_cluster
from queueing.cluster.base import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    ChangeJournal,
    Cluster,
    ClusterError,
    FreshReads,
    JobInfo,
    JobNotFound,
    JobRef,
    QueueUnitMirror,
)
from queueing.lease import Fence, FlushingFence, Lease, without_flush
from queueing.models import Queue, Quota, Workload
from queueing.state.calls import Call, in_flight, run_calls

log = logging.getLogger(__name__)

# A workload created moments ago may not be in the cluster's (watch) view yet.
MISSING_GRACE = timedelta(seconds=30)
# Finished workloads keep their QueueUnit phase up to date for this long.
MIRROR_FINISHED_FOR = timedelta(hours=1)


@dataclass
class SyncReport:
    registered: int = 0
    transitions: int = 0
    readmitted: int = 0
    resuspended: int = 0
    cancelled: int = 0
    mirrored: int = 0
    incremental: bool = False  # only the jobs changed since the last sync were looked at
    unplaced: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "registered": self.registered,
            "transitions": self.transitions,
            "readmitted": self.readmitted,
            "resuspended": self.resuspended,
            "cancelled": self.cancelled,
            "mirrored": self.mirrored,
            "incremental": self.incremental,
            "unplaced": self.unplaced[:20],
            "errors": self.errors[:20],
        }


# Workloads reconciled (or jobs registered) per transaction.
CHUNK = 500


class SyncRow(NamedTuple):
    """A workload as the sync reads it (not its pod sets, labels or explanation): a
    tuple, not a model instance -- a full sync reads every active workload, and Django's
    (deferred-field) instances cost several times as much to make."""

    id: int
    tenant_id: int
    queue_id: int
    phase: str
    kind: str
    api_version: str
    namespace: str
    name: str
    object_uid: str
    pool: str
    message: str
    created_at: datetime | None
    started_at: datetime | None
    requeue_at: datetime | None

    @property
    def pk(self) -> int:
        return self.id


SYNC_FIELDS = SyncRow._fields
Synced = SyncRow | Workload  # what _reconcile reads (the tests hand it model instances)


def _rows(query: Any) -> list[SyncRow]:
    return [SyncRow(*values) for values in query.order_by("id").values_list(*SYNC_FIELDS)]


@dataclass(frozen=True)
class Checks:
    """What the sync confirms before it gives quota back or cancels (see sync_cluster)."""

    stopped: Callable[[JobInfo], bool]
    gone: Callable[[JobRef], bool]


def _repair(cluster: Cluster, calls: list[Call], report: SyncReport, fence: Fence) -> None:
    """The repairs, through the one loop for cluster calls after a commit (state.calls);
    each success counts in the report under its call's ``label``."""

    def counted(call: Call) -> Call:
        def done() -> None:
            setattr(report, call.label, getattr(report, call.label) + 1)

        return replace(call, done=done)

    run_calls(cluster, [counted(c) for c in calls], fence, report.errors, raise_lost=True)


def pool_selector(workload: Synced) -> dict[str, str]:
    from django.conf import settings

    label = getattr(settings, "KQ_POOL_LABEL", "koord-queue/pool")
    return {label: workload.pool} if workload.pool else {}


def sync_cluster(
    cluster: Cluster | None = None, now: datetime | None = None, lease: Lease | None = None
) -> SyncReport:
    """Bring workloads in line with what the cluster reports. See the module docstring.

    With the sync ``lease``, repairs stop (LeaseLost) once it cannot outlive them."""
    cluster = cluster or get_cluster()
    # Its transitions and registrations commit without waiting for the WAL's flush; the
    # first repair's fence flushes them (and the lease's take) before any cluster call.
    fence = (
        FlushingFence(lease)
        if lease is not None and connection.vendor == "postgresql"
        else Fence(lease)
    )
    now = now or timezone.now()
    report = SyncReport()
    started = time.perf_counter()
    checks = _checks(cluster)

    # With a watch cache, a sync between full ones looks only at the jobs that changed
    # since this process's last sync (and at their workloads).
    journal = cluster if isinstance(cluster, ChangeJournal) else None
    mark = _marks.get(cluster) if journal is not None else None
    keys = None
    if journal is not None and mark is not None and time.monotonic() < mark[1]:
        cursor, keys = journal.changed_jobs(mark[0])
        if keys is not None:
            try:
                infos = journal.job_infos(keys)
            except ClusterError:  # the cache went away meanwhile: a full sync instead
                keys = None
        if keys is not None:
            report.incremental = True
            jobs = [job for job in infos.values() if job is not None]
            uids = sorted({job.ref.uid for job in jobs if job.ref.uid})
            # One read for the active workloads of these jobs and for any workload that
            # stands for one of them (``known``, see _sync_jobs): one snapshot, so a
            # workload finished meanwhile is in one or the other.
            rows, settings_mark = _changed_rows_and_mark(keys, uids)
            active_phases = set(ACTIVE_PHASES)
            active = [
                w
                for w in rows
                if w.phase in active_phases and (w.kind, w.namespace, w.name) in keys
            ]
            known = {w.object_uid for w in rows if w.object_uid}
            _sync_jobs(
                cluster,
                jobs,
                active,
                now,
                report,
                fence,
                checks,
                known=known,
                settings_mark=settings_mark,
            )
            _marks[cluster] = (cursor, mark[1])
    if keys is None:
        cursor = journal.changed_jobs(None)[0] if journal is not None else (0, 0)
        cluster.tick(now)
        active = _rows(Workload.objects.filter(phase__in=ACTIVE_PHASES))
        _sync_jobs(cluster, cluster.jobs(), active, now, report, fence, checks)
        if journal is not None:
            _marks[cluster] = (cursor, time.monotonic() + settings.KQ_FULL_SYNC_S)

    jobs_done = time.perf_counter()
    if settings.KQ_MIRROR_QUEUEUNITS and isinstance(cluster, QueueUnitMirror):
        try:
            report.mirrored = mirror_queue_units(cluster, now)
        except ClusterError as exc:
            report.errors.append(f"QueueUnit mirroring: {exc}")
    kubesync.after_sync(cluster, now)
    trace.mark(
        "sync",
        incremental=report.incremental,
        transitions=report.transitions,
        registered=report.registered,
        jobs_ms=round((jobs_done - started) * 1000, 1),
        after_ms=round((time.perf_counter() - jobs_done) * 1000, 1),
    )
    return report


def _changed_rows_and_mark(
    keys: Iterable[tuple[str, str, str]], uids: Sequence[str]
) -> tuple[list[SyncRow], tuple[Any, ...] | None]:
    """The active workloads of exactly the jobs ``keys`` names (kind, namespace, name),
    and the workloads (any phase) that stand for one of ``uids``, in one statement with
    the settings' mark (``_rows_and_mark``). Not each name in each namespace: jobs named
    alike in many namespaces (one per queue, as in Kueue's baseline) made that read
    every namespace's namesakes too, several times the rows the sync needed, from a scan
    of every active row. On PostgreSQL the keys are three array parameters, each key
    probing the partial unique index on the three (a condition per key made the driver
    and the ORM spend more on the statement than the read saved): ``_changed_statement``."""
    wanted = sorted(set(keys))
    if not wanted and not uids:
        return [], None  # nothing can match: no statement at all
    if connection.vendor != "postgresql":
        return _rows_and_mark(Workload.objects.filter(_active_of(wanted) | Q(object_uid__in=uids)))
    return _rows_and_mark(_changed_statement(wanted, uids))


def _changed_statement(
    wanted: Sequence[tuple[str, str, str]], uids: Sequence[str]
) -> tuple[str, list[Any]]:
    """PostgreSQL's read of ``_changed_rows_and_mark``: its statement and parameters."""
    q = connection.ops.quote_name
    table = q(Workload._meta.db_table)
    columns = ", ".join(f"w.{q(_column(n))}" for n in SYNC_FIELDS)
    kind, namespace, name = (q(c) for c in ("kind", "namespace", "name"))
    # Each key and each uid is its own index probe (a LATERAL subquery with OFFSET 0 is
    # planned per outer row, never flattened into a join): the keys on the partial unique
    # index, whose condition the active phases written out as literals match, the uids
    # on theirs. Planned as a join, the read's plan rested on the table's statistics:
    # without them (a table that grew in a burst, never analyzed yet) PostgreSQL hashed
    # every active row and scanned the whole table for the uids, 40 ms a sync in Kueue's
    # baseline for what the probes read in ~2.
    active = ", ".join(_literal(str(phase)) for phase in ACTIVE_PHASES)
    sql = (
        "SELECT w.* FROM unnest(%s::varchar[], %s::varchar[], %s::varchar[]) "  # noqa: S608
        f"AS k({kind}, {namespace}, {name}) CROSS JOIN LATERAL (SELECT {columns} FROM {table} w "
        f"WHERE w.{kind} = k.{kind} AND w.{namespace} = k.{namespace} AND w.{name} = k.{name} "
        f"AND w.{q('phase')} IN ({active}) OFFSET 0) w "
        "UNION SELECT w.* FROM unnest(%s::varchar[]) AS u(uid) CROSS JOIN LATERAL "
        f"(SELECT {columns} FROM {table} w WHERE w.{q('object_uid')} = u.uid OFFSET 0) w"
    )
    params = [
        [k for k, _, _ in wanted],
        [n for _, n, _ in wanted],
        [m for _, _, m in wanted],
        list(uids),
    ]
    return sql, params


def _literal(value: str) -> str:
    """A phase as an SQL string literal: one of the product's own names, never input."""
    if not value.isalnum():
        raise ValueError(f"{value!r} is not a phase name")
    return f"'{value}'"


def _column(name: str) -> str:
    """The column of a workload's field (or of its attname, ``tenant_id``)."""
    f = Workload._meta.get_field(name)
    column = getattr(f, "column", None)
    if not isinstance(column, str):
        raise ValueError(f"{name!r} is not a column of a workload.")
    return column


def _active_of(keys: Iterable[tuple[str, str, str]]) -> Q:
    """The active workloads named by ``keys`` (kind, namespace, name), exactly: one
    condition per kind and namespace, with its names (SQLite's form of the read above)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for kind, namespace, name in keys:
        grouped.setdefault((kind, namespace), []).append(name)
    matches = Q(pk__in=[])  # no keys: nothing
    for (kind, namespace), names in sorted(grouped.items()):
        matches |= Q(phase__in=ACTIVE_PHASES, kind=kind, namespace=namespace, name__in=names)
    return matches


# Per cluster adapter of this process: (journal cursor of its last sync, monotonic time
# the next full sync is due).
_marks: weakref.WeakKeyDictionary[Any, tuple[Any, float]] = weakref.WeakKeyDictionary()


def _checks(cluster: Cluster) -> Checks:
    fresh = cluster if isinstance(cluster, FreshReads) and cluster.views_may_lag else None

    def stopped(job: JobInfo) -> bool:
        """The job is suspended with nothing running, so its quota can be given back. A
        view that may lag (a watch cache) is confirmed by a fresh read first."""
        if not (job.suspended and job.active == 0):
            return False
        if fresh is None:
            return True
        try:
            now = fresh.fresh_job(job.ref)
        except ClusterError:  # gone or unreadable: a later sync decides
            return False
        return bool(now.suspended and now.active == 0)

    def gone(ref: JobRef) -> bool:
        """The job is not in the view; with a view that may lag, a fresh read agrees."""
        if fresh is None:
            return True
        try:
            fresh.fresh_job(ref)
        except JobNotFound:
            return True
        except ClusterError:
            return False
        return False

    return Checks(stopped=stopped, gone=gone)


def _sync_jobs(
    cluster: Cluster,
    jobs: Sequence[JobInfo],
    active: Sequence[Synced],
    now: datetime,
    report: SyncReport,
    fence: Fence,
    checks: Checks,
    known: set[str] | None = None,
    settings_mark: tuple[Any, ...] | None = None,
) -> None:
    """Reconcile ``active`` workloads with ``jobs`` (a workload whose job is not among
    them has none), then register the jobs no workload stands for. ``known``: the uids
    of the workloads (any phase) among the jobs', read with ``active`` in one statement;
    else they are read here. ``settings_mark``: the quotas' and queues' (_placements),
    read with them."""
    by_uid = {job.ref.uid: job for job in jobs if job.ref.uid}
    by_name = {(job.ref.kind, job.ref.namespace, job.ref.name): job for job in jobs}
    seen: set[tuple[str, str, str]] = set()
    for start in range(0, len(active), CHUNK):
        repairs: list[Call] = []
        moves: list[actions.Move] = []
        for workload in active[start : start + CHUNK]:
            job = by_uid.get(workload.object_uid) if workload.object_uid else None
            if job is None:
                job = by_name.get((workload.kind, workload.namespace, workload.name))
                if job is not None and workload.object_uid and job.ref.uid != workload.object_uid:
                    job = None  # same name, another object: ours was deleted
            if job is not None:
                seen.add((job.ref.kind, job.ref.namespace, job.ref.name))
            _reconcile(workload, job, now, repairs, moves, checks)
        # One commit (and one notification) per chunk: on PostgreSQL its one statement,
        # committed by itself (actions.transitions.one_statement); else a transaction.
        if actions.one_statement(moves):
            faults.reach("sync.before_commit", work=len(moves))
            with without_flush():
                made_moves = actions.transition_many(moves).made
        else:
            with transaction.atomic():
                made_moves = actions.transition_many(moves).made
                faults.reach("sync.before_commit", work=len(moves))
        for made in made_moves:
            if made.move.to_phase == Phase.CANCELLED:
                report.cancelled += 1
            else:
                report.transitions += 1
        faults.reach("sync.committed", work=len(moves) + len(repairs))
        if trace.on() and made_moves:
            names = {w.pk: f"{w.namespace}/{w.name}" for w in active[start : start + CHUNK]}
            trace.mark(
                "committed",
                finished=[
                    names.get(m.move.workload_id)
                    for m in made_moves
                    if m.move.to_phase in (Phase.SUCCEEDED, Phase.FAILED)
                ],
                moved=len(made_moves),
            )
        _repair(cluster, repairs, report, fence)

    new = [
        job
        for key, job in by_name.items()
        if key not in seen and job.state not in (SUCCEEDED, FAILED)
    ]
    # A view that lags (a watch cache) may still show a job running whose workload another
    # worker has already finished: it is no longer among the active, yet it is not new.
    # Read after ``active``, so any finish committed before that read is seen here.
    uids = [job.ref.uid for job in new if job.ref.uid] if known is None else []
    known = set() if known is None else known
    for start in range(0, len(uids), CHUNK):
        known.update(
            Workload.objects.filter(object_uid__in=uids[start : start + CHUNK]).values_list(
                "object_uid", flat=True
            )
        )
    new = [job for job in new if job.ref.uid not in known]
    memo = _placements(settings_mark) if new else {}
    for start in range(0, len(new), CHUNK):
        repairs = []
        with without_flush():
            _register_all(new[start : start + CHUNK], report, repairs, memo)
        _repair(cluster, repairs, report, fence)


def mirror_queue_units(cluster: QueueUnitMirror, now: datetime) -> int:
    """Show each workload's phase, under kube-queue's name, in its job's QueueUnit."""
    rows = Workload.objects.filter(
        Q(phase__in=ACTIVE_PHASES) | Q(finished_at__gte=now - MIRROR_FINISHED_FOR)
    ).values_list("kind", "namespace", "name", "phase", "reason")
    return cluster.mirror_queue_units(
        {
            (kind, namespace, name): (compat.kube_queue_phase(phase), reason[:300])
            for kind, namespace, name, phase, reason in rows
        }
    )


def _reconcile(
    workload: Synced,
    job: JobInfo | None,
    now: datetime,
    repairs: list[Call],
    moves: list[actions.Move],
    checks: Checks,
) -> None:
    """What one workload needs: transitions go to ``moves``, cluster calls to ``repairs``."""
    ref = JobRef(
        workload.kind, workload.api_version, workload.namespace, workload.name, workload.object_uid
    )
    expect = (workload.phase,)
    if job is None:
        if workload.created_at and now - workload.created_at < MISSING_GRACE:
            return
        if not checks.gone(ref):
            return
        moves.append(
            actions.Move(
                workload.pk,
                Phase.CANCELLED,
                reason="Deleted",
                message="The cluster object was deleted.",
                expect=expect,
                fields={"finished_at": now},
            )
        )
        return

    phase = workload.phase
    if job.state in (SUCCEEDED, FAILED):
        succeeded = job.state == SUCCEEDED
        moves.append(
            actions.Move(
                workload.pk,
                Phase.SUCCEEDED if succeeded else Phase.FAILED,
                reason="Finished" if succeeded else "JobFailed",
                message=job.message,
                expect=expect,
                fields={
                    "finished_at": job.finished_at or timezone.now(),
                    "started_at": workload.started_at or job.started_at,
                },
            )
        )
        return
    if phase in (Phase.PENDING, Phase.BACKOFF):
        if not job.suspended:
            repairs.append(
                Call("suspend", ref, label="resuspended")
            )  # only the queue may release a job
        return
    if phase == Phase.ADMITTED:
        if job.suspended:
            if not in_flight(ref):  # else the cycle's own call is on its way (state.calls)
                repairs.append(Call("admit", ref, pool_selector(workload), label="readmitted"))
        elif job.state == RUNNING:
            moves.append(
                actions.Move(
                    workload.pk,
                    Phase.RUNNING,
                    reason="Started",
                    expect=(Phase.ADMITTED,),
                    fields={"started_at": job.started_at or now},
                )
            )
        return
    if phase == Phase.RUNNING:
        if checks.stopped(job):
            moves.append(
                _requeue(workload, now, reason="Suspended", message="Suspended outside the queue.")
            )
        return
    if phase == Phase.PREEMPTED:
        if not job.suspended:
            if not in_flight(ref):
                repairs.append(Call("suspend", ref, label="resuspended"))
        elif checks.stopped(job):
            moves.append(_requeue(workload, now, reason="Evicted", message=workload.message))


def _requeue(workload: Synced, now: datetime, *, reason: str, message: str) -> actions.Move:
    """The cluster confirmed the job is stopped: wait again, keeping the original place."""
    backoff = workload.requeue_at is not None and workload.requeue_at > now
    return actions.Move(
        workload.pk,
        Phase.BACKOFF if backoff else Phase.PENDING,
        reason=reason,
        message=message,
        expect=(workload.phase,),
        fields={
            "assignment": {},
            "pool": "",
            "started_at": None,
            "admitted_at": None,
            "requeue_at": workload.requeue_at if backoff else None,
        },
    )


Placement = tuple[Any, Any, Any] | str  # (tenant, quota, queue), or why it cannot be placed

# Where jobs go, per (namespace, queue label, quota label), kept between the syncs of this
# process while the quotas and queues stay as they were: a placement takes about seven
# queries (the queue by name, the namespace's quota, its leafness), and a sync that
# registers the jobs of thirty namespaces made two hundred of them. One query per sync
# that registers checks the quotas and queues (their count, newest id, versions and
# last update): any create, edit or delete changes it, and the memo starts afresh.
_placement_memo: dict[tuple[str, str, str], Placement] = {}
_placement_mark: tuple[Any, ...] | None = None


def _placements(mark: tuple[Any, ...] | None = None) -> dict[tuple[str, str, str], Placement]:
    """The memo, afresh unless the quotas and queues are as they were (``mark``: theirs,
    read already; else read here)."""
    global _placement_memo, _placement_mark
    mark = _settings_mark() if mark is None else mark
    if mark != _placement_mark:
        _placement_memo, _placement_mark = {}, mark
    return _placement_memo


def _mark_parts() -> list[str]:
    """One query per settings table: its count, newest id, versions and last update."""
    q = connection.ops.quote_name
    return [
        f"SELECT COUNT(*), MAX({q('id')}), SUM({q('version')}), MAX({q('updated_at')}) "  # noqa: S608
        f"FROM {q(model._meta.db_table)}"
        for model in (Quota, Queue)
    ]


def _settings_mark() -> tuple[Any, ...]:
    with connection.cursor() as cursor:
        # Identifiers from the models' meta, quoted; no values.
        cursor.execute(" UNION ALL ".join(_mark_parts()))
        return tuple(tuple(row) for row in cursor.fetchall())


def _rows_and_mark(query: Any) -> tuple[list[SyncRow], tuple[Any, ...] | None]:
    """``_rows(query)`` and, on PostgreSQL, the quotas' and queues' mark (_placements) in
    the same statement: the workloads joined to the one row of the mark (a row without a
    workload when there is none). Elsewhere the mark is None (read when needed)."""
    if isinstance(query, tuple):  # PostgreSQL's statement of the fields, made already
        sql, params = query
    elif connection.vendor != "postgresql":
        return _rows(query), None
    else:
        try:
            sql, params = query.order_by("id").values_list(*SYNC_FIELDS).query.sql_with_params()
        except EmptyResultSet:  # nothing can match (no names, no uids): no statement at all
            return [], None
    first, second = _mark_parts()
    width = len(SYNC_FIELDS)
    statement = (
        f"SELECT a.*, b.*, r.* FROM ({first}) a CROSS JOIN ({second}) b "  # noqa: S608
        f'LEFT JOIN ({sql}) r ON TRUE ORDER BY r."id"'
    )
    with connection.cursor() as cursor:
        # Identifiers from the models' meta, quoted; every value a parameter.
        cursor.execute(statement, params)
        fetched = cursor.fetchall()
    if not fetched:
        return [], None
    mark = (tuple(fetched[0][:4]), tuple(fetched[0][4:8]))
    rows = [SyncRow._make(row[8 : 8 + width]) for row in fetched if row[8] is not None]
    return rows, mark


def _placement(job: JobInfo, memo: dict[tuple[str, str, str], Placement]) -> Placement:
    """Where a job goes, from its namespace, queue label and quota label; jobs that share
    the three share the answer (one lookup per distinct placement while ``memo`` lives:
    see _placements)."""
    queue_name = compat.queue_name(job.labels, job.annotations) or ""
    quota_name = compat.quota_name(job.labels) or ""
    key = (job.ref.namespace, queue_name, quota_name)
    if key not in memo:
        queue = kubequeue.find_queue(queue_name, job.ref.namespace) if queue_name else None
        quota = Quota.objects.filter(name=quota_name).first() if quota_name else None
        try:
            tenant, quota, queue, _namespace = actions.resolve_placement(
                None, namespace=job.ref.namespace, queue=queue, quota=quota
            )
            memo[key] = (tenant, quota, queue)
        except Exception as exc:  # a job we cannot place stays suspended and is reported
            memo[key] = _first_message(exc)
    return memo[key]


def _register_all(
    jobs: Sequence[JobInfo],
    report: SyncReport,
    repairs: list[Call],
    memo: dict[tuple[str, str, str], Placement],
) -> None:
    """New jobs become Pending workloads: one insert for all that can be placed (one by
    one when that insert collides, to find the one that does). Each insert is its own
    transaction (a savepoint in the caller's, if any; on PostgreSQL one statement, no
    transaction at all): the placements before it only read, so a transaction around
    the chunk would add a savepoint's two round trips."""
    items: list[tuple[JobInfo, dict[str, Any]]] = []
    for job in jobs:
        item = _registration(job, _placement(job, memo), report)
        if item is not None:
            items.append((job, item))
    if not items:
        return
    # A collision inserts nothing, then one by one. On PostgreSQL the insert is one
    # statement, atomic without a transaction of its own (no BEGIN and COMMIT).
    alone = connection.vendor == "postgresql" and not connection.in_atomic_block
    try:
        with contextlib.nullcontext() if alone else transaction.atomic():
            actions.register_cluster_workloads([item for _, item in items])
        registered = [job for job, _ in items]
    except (IntegrityError, NotSupportedError):
        registered = []
        for job, item in items:
            try:
                with transaction.atomic():
                    actions.register_cluster_workload(**item)
                registered.append(job)
            except Exception as exc:
                report.unplaced.append(f"{job.ref.namespace}/{job.ref.name}: {_first_message(exc)}")
    report.registered += len(registered)
    for job in registered:
        if not job.suspended:
            repairs.append(Call("suspend", job.ref, missing_ok=True, label="resuspended"))


def _registration(job: JobInfo, placement: Placement, report: SyncReport) -> dict[str, Any] | None:
    """The arguments of register_cluster_workload for a job, or None (reported unplaced)."""
    where = f"{job.ref.namespace}/{job.ref.name}"
    if isinstance(placement, str):
        report.unplaced.append(f"{where}: {placement}")
        return None
    tenant, quota, queue = placement
    priority = job.priority
    annotated = compat.annotation(job.annotations, compat.PRIORITY_KEY)
    if annotated is not None:
        try:
            priority = int(annotated)
        except ValueError:
            report.unplaced.append(f"{where}: priority {annotated!r} is not a number")
            return None
    try:
        pod_sets = actions.parse_pod_sets(list(job.pod_sets), canonical=True)
    except Exception as exc:
        why = job.message if not job.pod_sets and job.message else _first_message(exc)
        report.unplaced.append(f"{where}: {why}")
        return None
    return {
        "tenant": tenant,
        "quota": quota,
        "queue": queue,
        "ref": job.ref,
        "pod_sets": pod_sets,
        "priority": priority or 0,
        "priority_class": job.priority_class,
        "expected_runtime_s": job.expected_runtime_s,
        "labels": dict(job.labels),
        "annotations": dict(job.annotations),
        "created_at": job.created_at,
    }


def _first_message(exc: Exception) -> str:
    messages = getattr(exc, "message_dict", None)
    if isinstance(messages, Mapping):
        for values in messages.values():
            return str(values[0])
    return str(exc)

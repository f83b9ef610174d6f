"""apply(): write a cycle's decisions, then make the cluster follow.

One transaction, in numbered steps (``apply`` below). Phases move through
``actions.transitions`` as the sync's and the actions' do: the rows are read and locked
in one query, and only those still in the phase the decision was made from move, so a
decision computed from a stale snapshot, or by a worker that lost its lease (the fencing
token is checked first), never double-admits. Each kind of change is one statement for
the whole cycle, not one per workload; the changes are announced through the same
``transitions.publish``. Cluster calls come after the commit, through the loop the sync
uses too (state.calls).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When

from queueing import faults, trace, wake, world
from queueing.actions.transitions import Move, publish, transition_many
from queueing.choices import HOLDING_PHASES, WAITING_PHASES, Phase
from queueing.cluster.base import Cluster, JobRef
from queueing.engine.explanation import fmt
from queueing.engine.types import Admission, CycleResult, Snapshot
from queueing.lease import Fence, FlushingFence, Lease, can_defer_flush, check
from queueing.models import CycleRun, Workload
from queueing.state import batch, placement
from queueing.state.annotate import annotations_statement, located, pending_annotations
from queueing.state.calls import (
    Call,
    admit_call,
    can_run_in_background,
    run_calls,
    run_calls_in_background,
)
from queueing.state.quotas import charge_ledgers, publish_quotas, sample_usage, store_quota_state
from queueing.state.snapshot import SnapshotIndex, from_epoch

log = logging.getLogger(__name__)

#: The node holds a cycle's record keeps (``CycleRun.holds``), for the cluster page: a
#: cycle that holds room on more nodes keeps the first (the drains', then reservations).
MAX_HOLDS = 2000


@dataclass
class ApplyReport:
    cycle_id: int | None = None
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    #: Admissions withdrawn because another tree took their room on shared nodes.
    displaced: list[int] = field(default_factory=list)
    annotated: int = 0
    conflicts: int = 0
    engine_ms: float = 0.0
    errors: list[str] = field(default_factory=list)
    #: The cluster calls still running (``apply(then=...)``), in the background.
    pending: Future[None] | None = None
    #: Set by the caller (admission.cycle_root): the journal cursor its world read up
    #: to, and whether work was left waiting for room on the nodes (queueing.wake).
    seen: str | None = None
    node_bound: bool = False
    #: The placement lock's token this apply took (None: it took none), and whether it
    #: read what the other trees hold under it (not when nobody took the lock since the
    #: caller's view of their holdings: ``unchanged_since``).
    placement_token: int | None = None
    placement_read: bool = False


def apply(
    result: CycleResult,
    snapshot: Snapshot,
    index: SnapshotIndex,
    lease: Lease | None,
    cluster: Cluster,
    *,
    engine_ms: float = 0.0,
    full: bool = True,
    annotate: bool = True,
    then: Callable[[], None] | None = None,
    started: float | None = None,
    unchanged_since: int | None = None,
) -> ApplyReport:
    """Write the cycle's decisions, then make the cluster follow. See the module docstring.

    ``annotate=False``: the result has no positions or ETAs (the engine ran without its
    forecast); the waiting keep what they show. ``then`` (the caller's release of the
    lease): against an API server the cluster calls run in this process's background
    pool (``report.pending``) and ``then`` runs there once they are done; else after
    them, here. Either way it runs exactly once, after the calls. ``started``: the
    ``time.perf_counter()`` the cycle started at; the cycle's record carries its
    duration up to the record (the commit and the cluster calls after it are not in it).
    ``unchanged_since``: the placement lock's token as of the snapshot's view of what the
    other trees hold (``PassReads.placement_token``), if known: the view is read again
    under the lock only if somebody took it since (``placement.lock_and_read``)."""
    now = index.now
    report = ApplyReport(engine_ms=engine_ms)
    steps: dict[str, float] = {}
    clock = time.perf_counter()

    def step(name: str) -> None:
        nonlocal clock
        if trace.on():
            at = time.perf_counter()
            steps[name] = round((at - clock) * 1000, 1)
            clock = at

    # Calls that will run in the background get the commit made durable before them
    # (FlushingFence); the commit itself does not wait for the WAL's flush (~3 ms of
    # disk per cycle on the bench's machine), so the next tree's cycle starts meanwhile.
    background = then is not None and can_run_in_background(cluster)
    deferred = False
    with transaction.atomic():
        deferred = background and lease is not None and can_defer_flush()
        # 1. The fence: the lease is still ours, or nothing of this cycle is written. A
        # cycle that admits takes the placement lock (step 2) in the same statement (and
        # the commit's deferred flush, in either), and reads what the other trees hold
        # under it in the same round trip (placement.lock_and_read).
        elsewhere = None
        if result.admissions:
            report.placement_token, elsewhere = placement.lock_and_read(
                index.quota_ids.values(),
                fence=lease,
                defer_flush=deferred,
                unchanged_since=unchanged_since,
            )
            report.placement_read = elsewhere is not None
        elif lease is not None:
            check(lease, defer_flush=deferred)

        step("fence")
        # 2. Shared nodes: withdraw admissions whose room another tree took meanwhile.
        admissions = _placeable(result, snapshot, index, report, elsewhere)

        step("placement")
        # 3. Phases: admissions, preemptions, admission timeouts; one statement per kind.
        wanted = (
            [_admitted(a, index, now) for a in admissions]
            + [
                _preempted(p.victim_id, p.preemptor_id, p.reason, p.message)
                for p in result.preemptions
            ]
            + [_timed_out(r.workload_id, r.requeue_at, r.reason) for r in result.requeues]
        )
        moved = transition_many(wanted, at=now, publish_changes=False)
        for made in moved.made:
            getattr(report, made.move.kind).append(made.move.workload_id)
        report.conflicts += len(moved.conflicts)

        step("phases")
        # 4. Nominations: workloads the next cycles keep room for (after a preemption).
        # Which of them await work ending within the grace period (nothing evicted for
        # them: they freeze no aged claim, see engine.cyclestate). One statement, for
        # the rows whose flags change.
        if result.nominations:
            waits = list(result.awaiting)
            waiting = set(waits)
            others = [w for w in result.nominations if w not in waiting]
            flags_change = Q(nominated=False)
            if waits:
                flags_change |= Q(id__in=waits, awaiting=False)
            if others:
                flags_change |= Q(id__in=others, awaiting=True)
            Workload.objects.filter(flags_change, id__in=list(result.nominations)).filter(
                phase__in=WAITING_PHASES
            ).update(
                nominated=True,
                awaiting=Case(When(id__in=waits, then=True), default=False)
                if waits
                else Value(False),
                updated_at=now,
            )

        step("nominations")
        # 5-7. On PostgreSQL one round trip (state.batch) for what the waiting show, the
        # quotas and the cycle's record; elsewhere one after the other.
        writes: list[batch.Statement] = []
        # 5. What the waiting show: position, ETA, reason (one statement); not after an
        # engine run without the forecast (state.forecast_due), which keeps them.
        annotated = pending_annotations(result, index, full=full) if annotate else []
        annotations = annotations_statement(annotated, now)
        if annotations is not None:
            writes.append(annotations)
        report.annotated = len(annotated)

        step("annotations")
        # 6. Quotas: usage ledger, runtime quota and usage on the rows, usage samples.
        charged = charge_ledgers(result, index, snapshot.config, writes)
        quota_changes = store_quota_state(result, index, writes)
        sample_usage(result, index, charged)

        step("quotas")
        # 7. The cycle's record.
        report.cycle_id = _record(
            result,
            index,
            lease,
            report,
            engine_ms=engine_ms,
            full=full,
            started=started,
            writes=writes,
        )

        step("record")
        # 8. After the commit: the live stream hears what changed (the cycle's own
        # writes wake no cycle); a withdrawn admission wakes this tree again.
        changed = [*moved.changes, *located(annotated, index)]
        publish(changed, cycle_id=report.cycle_id)
        # The tree's worlds (this process's and any other's) re-read what moved; the
        # world this cycle read takes its annotations in place.
        world.record_cycle(
            index.root,
            [*report.admitted, *report.preempted, *report.requeued, *result.nominations],
            annotated,
            index.world,
        )
        publish_quotas(quota_changes, report.cycle_id)
        if report.displaced:
            wake.wake_on_commit([index.root], reason="displaced")
        faults.reach("apply.before_commit", work=len(moved.made))
        step("on_commit")

    # 9. The cluster follows: idempotent calls; what they miss, the next sync repeats.
    # The fence stops them if the lease ran out (another worker may have decided since).
    pools = {a.workload_id: a.pool or "" for a in admissions}
    calls: list[Call] = [
        admit_call(_ref(index.rows[w]), pools.get(w, ""), settings.KQ_POOL_LABEL)
        for w in report.admitted
    ]
    calls += [Call("suspend", _ref(index.rows[w])) for w in report.preempted + report.requeued]
    faults.reach("apply.committed", work=len(calls))
    step("commit")
    if trace.on():
        trace.mark(
            "applied",
            root=index.root,
            steps=steps,
            placement_read=report.placement_read,
            annotated=report.annotated,
            admitted=[
                f"{index.rows[w]['namespace']}/{index.rows[w]['name']}" for w in report.admitted
            ],
        )
    if calls and background:
        assert then is not None
        done = then

        def finish() -> None:
            try:
                finish_calls(report)
            finally:
                done()

        fence = FlushingFence(lease) if deferred and lease is not None else Fence(lease)
        report.pending = run_calls_in_background(cluster, calls, fence, report.errors, finish)
        return report
    try:
        run_calls(cluster, calls, Fence(lease), report.errors)
        finish_calls(report)
    finally:
        if then is not None:
            then()
    return report


def finish_calls(report: ApplyReport) -> None:
    """After the cycle's cluster calls: their errors on the cycle's record."""
    if trace.on() and (report.admitted or report.preempted or report.requeued):
        trace.mark("patched", cycle=report.cycle_id, calls=len(report.admitted))
    if report.errors and report.cycle_id is not None:
        CycleRun.objects.filter(pk=report.cycle_id).update(errors=report.errors[:50])


def _placeable(
    result: CycleResult,
    snapshot: Snapshot,
    index: SnapshotIndex,
    report: ApplyReport,
    now_elsewhere: placement.Usage | None,
) -> list[Admission]:
    """The admissions that still fit the nodes under the placement lock (state.placement),
    taken by step 1 with what the other trees hold now (``now_elsewhere``; None: nobody
    took the lock since the snapshot's view of it, so nothing grew)."""
    if not result.admissions:
        return []
    if now_elsewhere is None or not placement.grew(index.elsewhere, now_elsewhere):
        return list(result.admissions)
    out = placement.withdrawn(result.admissions, snapshot, index.elsewhere, now_elsewhere)
    report.displaced = sorted(out)
    report.conflicts += len(out)
    if out:
        log.info(
            "%s: %d admission(s) withdrawn, another tree took their room", index.root, len(out)
        )
    return [a for a in result.admissions if a.workload_id not in out]


def _admitted(admission: Admission, index: SnapshotIndex, now: datetime) -> Move:
    assignment = {node: held.to_dict() for node, held in admission.assignment.items()}
    queued_at = index.rows[admission.workload_id]["queue_order_at"]
    return Move(
        admission.workload_id,
        Phase.ADMITTED,
        tuple(WAITING_PHASES),
        fields={
            "admitted_at": now,
            "wait_s": max(0.0, (now - queued_at).total_seconds()),
            "assignment": assignment,
            "pool": admission.pool or "",
            "attempts": F("attempts") + 1,
            "requeue_at": None,
            "nominated": False,
            "awaiting": False,
            "position": None,
            "global_position": None,
            "eta_p50": None,
            "eta_p90": None,
            "eta": None,
            "explanation": None,
            "reason": _admitted_reason(admission),
        },
        reason="Admitted",
        message=f"Placed on {', '.join(sorted(assignment)) or 'no node'}.",
        kind="admitted",
    )


def _admitted_reason(admission: Admission) -> str:
    """Why it was admitted: within its quota's share, or on room another quota lent it
    (``engine.lending``: a share no waiting work of that quota could use this cycle)."""
    if not admission.lent:
        return "Admitted: within quota and placed on nodes."
    by = ", ".join(admission.lent_by) or "its quota tree"
    return (
        f"Admitted on {fmt(admission.lent)} lent by {by} -- room their waiting work "
        "could not use this cycle -- and placed on nodes."
    )[:500]


def _preempted(victim_id: int, preemptor_id: int, reason: str, message: str) -> Move:
    return Move(
        victim_id,
        Phase.PREEMPTED,
        (Phase.ADMITTED, Phase.RUNNING),
        fields={
            "preempted_by_id": preemptor_id,
            "message": message,
            "reason": f"Preempted ({reason}): {message}"[:500],
        },
        reason=reason,
        message=message,
        kind="preempted",
    )


def _timed_out(workload_id: int, requeue_at: float | None, reason: str) -> Move:
    # Only an admission whose job never started can time out.
    return Move(
        workload_id,
        Phase.PREEMPTED,
        (Phase.ADMITTED,),
        fields={"requeue_at": from_epoch(requeue_at), "message": reason, "reason": reason[:500]},
        reason="AdmissionTimeout",
        message=reason,
        kind="requeued",
    )


def _record(
    result: CycleResult,
    index: SnapshotIndex,
    lease: Lease | None,
    report: ApplyReport,
    *,
    engine_ms: float,
    full: bool,
    started: float | None,
    writes: list[batch.Statement],
) -> int:
    """The cycle's record, sent with ``writes`` (on PostgreSQL in one round trip)."""
    waiting = sum(1 for row in index.rows.values() if row["phase"] in WAITING_PHASES)
    holding = sum(1 for row in index.rows.values() if row["phase"] in HOLDING_PHASES)
    cycle = CycleRun(
        root=index.root,
        started_at=index.now,
        engine_ms=engine_ms,
        duration_ms=(time.perf_counter() - started) * 1000 if started is not None else 0.0,
        admitted=len(report.admitted),
        preempted=len(report.preempted),
        requeued=len(report.requeued),
        pending=waiting + index.unlisted - len(report.admitted),
        running=holding + len(report.admitted),
        conflicts=report.conflicts,
        token=lease.token if lease else 0,
        worker=lease.holder if lease else "",
        stats={
            **{k: float(v) for k, v in result.stats.items()},
            "full": float(full),
            "displaced": float(len(report.displaced)),
        },
        holds=[h.to_dict() for h in result.holds[:MAX_HOLDS]],
    )
    if connection.vendor != "postgresql":
        batch.run(writes)
        cycle.save(force_insert=True)
        return int(cycle.pk)
    answers = batch.run([*writes, batch.insert(cycle)])
    rows = answers[-1]
    assert rows  # an INSERT ... RETURNING answers its row
    cycle.pk = rows[0][0]
    return int(cycle.pk)


def _ref(row: Mapping[str, Any]) -> JobRef:
    return JobRef(row["kind"], row["api_version"], row["namespace"], row["name"], row["object_uid"])

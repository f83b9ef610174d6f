"""One admission cycle, end to end: lease -> snapshot -> engine -> apply -> release.

The cluster-facing cycle (the engine's is ``queueing.engine.cycle``). Plain functions that
tests and the ``run_cycle`` command call directly; the Celery tasks
are thin wrappers around ``tick()``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Q

from queueing import faults, forecaster, nodeview, state, trace, wake, world
from queueing import lease as leases
from queueing.choices import HOLDING_PHASES, WAITING_PHASES
from queueing.cluster import get_cluster
from queueing.cluster.base import Cluster, NodeInfo, Timed
from queueing.engine import run_cycle as engine_cycle
from queueing.engine.explain import node_bound_of
from queueing.engine.invariants import check_cycle
from queueing.engine.lazy_explanations import Explanations
from queueing.models import CycleRun, Workload
from queueing.sync import SyncReport, sync_cluster

log = logging.getLogger(__name__)


@dataclass
class CycleSummary:
    """What one tick did, as the ``run_cycle`` command prints it."""

    admitted: int = 0
    preempted: int = 0
    requeued: int = 0
    pending: int = 0
    running: int = 0
    conflicts: int = 0
    duration_ms: float = 0.0
    engine_ms: float = 0.0
    roots: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: The trees a woken sync (or a fan-out) woke, each to its own task.
    woken: list[str] = field(default_factory=list)
    #: Whether the last sync of a woken sync's pass touched any tree (freed or asked).
    woken_last: bool = False
    #: The trees a woken sync's pass left for after its next sync (``KQ_SYNC_PASS_MS``).
    carried: list[str] = field(default_factory=list)
    sync: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "admitted": self.admitted,
            "preempted": self.preempted,
            "requeued": self.requeued,
            "pending": self.pending,
            "running": self.running,
            "conflicts": self.conflicts,
            "duration_ms": round(self.duration_ms, 1),
            "engine_ms": round(self.engine_ms, 1),
            "roots": self.roots,
            "skipped": self.skipped,
            "woken": self.woken,
            "sync": self.sync,
            "errors": self.errors[:10],
        }


def cycle_root(
    root: str,
    *,
    cluster: Cluster | None = None,
    now: datetime | None = None,
    lease_ttl_s: float | None = None,
    nodes: list[NodeInfo] | None = None,
    background: bool = False,
    shared: state.PassReads | None = None,
    lease: leases.Lease | None = None,
    release_later: list[leases.Lease] | None = None,
) -> state.ApplyReport | None:
    """Run the cycle of one quota tree under its lease; None when another worker has it.

    ``nodes``: the cluster's nodes when the caller has just read them (a tick reads them
    once for all its trees; what other trees admit meanwhile is counted from the
    database, not from this view). ``background``: against an API server the cycle's
    cluster calls run in the background (state.calls) and the lease is released there
    once they are done, so the next tree's cycle and the next sync overlap this one's
    round trips; the next cycle of this tree in this process waits for them first.
    ``shared``: what the pass's cycles read once for all of them (state.PassReads); this
    cycle's admissions are added to it. ``lease``: the tree's lease as the pass took it
    (``lease.acquire_many``, after this process's last calls for the tree were done),
    else taken here. ``release_later``: the lease is appended to it instead of released
    (the pass releases its leases at once, ``lease.release_many``) -- unless cluster calls
    still run in the background, which release it when they are done, as ever."""
    cluster = cluster or get_cluster()
    if lease is None:
        _wait_for_calls(root)
        taken = leases.acquire(f"cycle:{root}", ttl_s=lease_ttl_s)
    else:
        taken = leases.keep(lease, ttl_s=lease_ttl_s)
        if taken is None:
            raise leases.LeaseLost(f"the lease {lease.name!r} #{lease.token} expired")
    if taken is None:
        return None
    held: leases.Lease = taken
    released = False

    def release(now: bool = True) -> None:
        nonlocal released
        if not released:
            released = True
            if now or release_later is None:
                leases.release(held)
            else:
                release_later.append(held)

    me = threading.get_ident()

    def after_calls() -> None:
        # In the background pool (the calls ran there): now; here: with the pass's.
        release(now=threading.get_ident() != me)

    started = time.perf_counter()
    meter = trace.Meter().start()
    tree = world.world_of(root) if world.enabled() else None
    report: state.ApplyReport | None = None
    try:
        if nodes is None:
            nodes = cluster.nodes()
            nodeview.persist(nodes)  # what pages, the API and previews read (nodes' room)
        # Positions and ETAs at most every KQ_FORECAST_EVERY_S per tree: the woken cycles
        # between only admit, from the head of each queue (state.HEAD_ROWS), and leave
        # what the waiting show. A forecasting cycle is full (every waiting workload)
        # while that is cheap, else within its share of the time (state.full_cycle_due).
        forecast = state.forecast_due(root)
        noted = False  # whether this cycle notes itself as the annotations' writer
        ask = False  # whether to ask the forecaster, once this cycle's decisions commit
        if forecast and forecaster.serving():
            # A forecaster takes it (queueing.forecaster): this cycle only admits, from
            # the heads (their admissions are those of a full cycle: build_snapshot).
            ask = True
            state.forecast_done(root)
            forecast = False
        elif forecast and forecaster.lately():
            forecaster.take_over(tree)  # if the forecaster annotated last: read rows anew
            noted = True
        full = forecast and state.full_cycle_due(root)
        read_started = time.perf_counter()
        # One read: the world's tree and the snapshot's (the pass's, when it read them).
        quotas = (shared.quotas(root) if shared is not None else None) or state.read_quotas(root)
        seen: str | None = None
        if tree is not None:
            ahead = shared.journal(root) if shared is not None else None
            tree.refresh(state.tree_quota_ids(root, quotas), ahead)
            seen = tree.cursor  # what of the journal this cycle has read (wake.covered)
        refreshed = time.perf_counter()
        snapshot, index = state.build_snapshot(
            root,
            nodes=nodes,
            now=now,
            head=None if full else state.HEAD_ROWS,
            world=tree,
            forecast=forecast,
            quotas=quotas,
            shared=shared,
        )
        engine_started = time.perf_counter()
        result = engine_cycle(snapshot, forecast=forecast)
        engine_ms = (time.perf_counter() - engine_started) * 1000
        # The quota invariants, checked on what this very cycle decided (head-only and
        # world-fed snapshots included): a break is an error of the cycle, not silence.
        broken = check_cycle(snapshot, result)
        apply_started = time.perf_counter()
        report = state.apply(
            result,
            snapshot,
            index,
            held,
            cluster,
            engine_ms=engine_ms,
            full=full,
            annotate=forecast,
            then=after_calls if background else None,
            started=started,
            unchanged_since=shared.placement_token if shared is not None else None,
        )
        report.seen = seen
        if noted:
            forecaster.wrote(tree)
        if ask:
            # After the commit: the forecast starts from what this cycle decided.
            forecaster.request(root, after_commit=True)
        if shared is not None and report.admitted:
            took = set(report.admitted)
            for admission in result.admissions:
                if admission.workload_id in took:
                    shared.took(
                        index.quota_ids[admission.quota],
                        {node: held.to_dict() for node, held in admission.assignment.items()},
                    )
        if shared is not None:
            shared.locked(report.placement_token)
        report.node_bound = waits_for_nodes(result)
        if forecast:
            state.forecast_done(root, time.perf_counter() - started)
        assert report.cycle_id is not None
        trace.mark(
            "cycle",
            root=root,
            forecast=forecast,
            full=full,
            lease_ms=round((read_started - started) * 1000, 1),
            refresh_ms=round((refreshed - read_started) * 1000, 1),
            snapshot_ms=round((engine_started - refreshed) * 1000, 1),
            engine_ms=round(engine_ms, 1),
            apply_ms=round((time.perf_counter() - apply_started) * 1000, 1),
            ms=round((time.perf_counter() - started) * 1000, 1),
            admitted=len(report.admitted),
            **meter.stop(),
        )
        if tree is not None and report.conflicts > len(report.displaced):
            tree.invalidate()  # it believed something the database no longer says
        elapsed = time.perf_counter() - started
        if full:
            state.full_cycle_done(root, elapsed)
        if not full and _heads_exhausted(index, report):
            # A queue admitted every head it listed and more wait behind them: the room
            # may not be used up, and this cycle's own writes wake nothing.
            wake.wake([root], reason="heads exhausted")
        if broken:
            log.error("cycle of %s broke quota invariants: %s", root, "; ".join(broken[:5]))
            report.errors.extend(f"invariant: {problem}" for problem in broken)
        # The record carries its duration (apply's ``started``): only broken invariants
        # add a write, their errors.
        if broken:
            CycleRun.objects.filter(id=report.cycle_id).update(errors=report.errors[:50])
        return report
    except BaseException:
        # A lost lease, a database error: whatever this world believed, the next cycle
        # starts again from the database.
        if tree is not None:
            tree.invalidate()
        raise
    finally:
        meter.stop()
        if report is not None and report.pending is not None:
            _tree_calls[root] = report.pending  # releases the lease when the calls are done
        else:
            release(now=False)


# Per tree: the cluster calls of this process's last cycle of it, when they run in the
# background (cycle_root(background=True)).
_tree_calls: dict[str, Future[None]] = {}
CALLS_WAIT_S = 60.0


def _wait_for_calls(root: str) -> None:
    """Before a tree is cycled again here: its last cycle's calls are done (a decision
    about a job never races this process's own call for it)."""
    pending = _tree_calls.pop(root, None)
    if pending is None:
        return
    if trace.on() and not pending.done():
        waited = time.perf_counter()
        try:
            pending.result(timeout=CALLS_WAIT_S)
        except Exception:
            log.exception("the cluster calls of the last cycle of %s did not finish", root)
        trace.mark("calls_wait", root=root, ms=round((time.perf_counter() - waited) * 1000, 1))
        return
    try:
        pending.result(timeout=CALLS_WAIT_S)
    except Exception:  # a timeout or a bug: logged; the lease's fence still guards
        log.exception("the cluster calls of the last cycle of %s did not finish", root)


def _heads_exhausted(index: state.SnapshotIndex, report: state.ApplyReport) -> bool:
    """Whether a heads-only cycle admitted all the waiting it listed of some queue while
    others were left unlisted (then a full snapshot might have admitted more)."""
    if not index.unlisted or not report.admitted:
        return False
    admitted = set(report.admitted)
    waiting: dict[int, int] = {}
    taken: dict[int, int] = {}
    for workload_id, row in index.rows.items():
        if row["phase"] in WAITING_PHASES:
            waiting[row["queue_id"]] = waiting.get(row["queue_id"], 0) + 1
            if workload_id in admitted:
                taken[row["queue_id"]] = taken.get(row["queue_id"], 0) + 1
    return any(
        count == waiting[queue_id] and count >= state.HEAD_ROWS for queue_id, count in taken.items()
    )


def tick(
    *, cluster: Cluster | None = None, now: datetime | None = None, dispatch: bool = False
) -> CycleSummary:
    """Sync with the cluster, then cycle every quota tree. What beat runs every few
    seconds: the periodic full reconciliation behind the event-driven ``react``.

    With wakes on, what woken tasks cover is not run here (wake.covered): the sync a
    woken one ran less than an interval ago or is about to run, a tree whose react is
    on its way or in which nothing changed since its last cycle. Events drive the work;
    the tick catches what a lost wake left undone and what time alone changes.

    ``dispatch`` (beat's task): what is left is not run here either but woken, each its
    own react on the cycle queue -- the tick takes milliseconds instead of a pass of
    cycles, so on a worker that also serves the cycle queue it never holds up the
    reacts queued behind it, and on another worker it never races the cycler for the
    same leases. Only while the cycle queue is served (``wake.reacts_served``: a react
    started since the last dispatch, or that dispatch is under two intervals old);
    otherwise the tick does the work itself, as without wakes."""
    from django.conf import settings

    cluster = cluster or get_cluster()
    started = time.perf_counter()
    summary = CycleSummary()
    every = state.roots()
    recent = wake.covered([wake.WOKEN_SYNC, *every], settings.KQ_CYCLE_INTERVAL_S)
    if dispatch and wake.reacts_served(settings.KQ_CYCLE_INTERVAL_S):
        return _dispatch(cluster, now, every, recent, summary, started)
    if wake.WOKEN_SYNC in recent:
        summary.sync = {"recent": True}
        trace.mark("tick_skips", what="sync")
    elif not _sync(cluster, now, summary):
        summary.skipped.append("sync")
    roots = [root for root in every if root not in recent]
    if len(roots) < len(every):
        trace.mark("tick_skips", what="cycles", n=len(every) - len(roots))
    _cycle_roots(cluster, roots, now, summary)
    _arm_timer(cluster, now)
    counts = Workload.objects.aggregate(
        pending=Count("id", filter=Q(phase__in=WAITING_PHASES)),
        running=Count("id", filter=Q(phase__in=HOLDING_PHASES)),
    )
    summary.pending = counts["pending"]
    summary.running = counts["running"]
    summary.duration_ms = (time.perf_counter() - started) * 1000
    return summary


def _dispatch(
    cluster: Cluster,
    now: datetime | None,
    every: list[str],
    recent: set[str],
    summary: CycleSummary,
    started: float,
) -> CycleSummary:
    """Beat's tick as a dispatcher: wake what woken tasks do not cover (a react already
    on its way takes the wake along: nothing is queued twice)."""
    asked = False
    if wake.WOKEN_SYNC in recent:
        summary.sync = {"recent": True}
    else:
        wake.wake(None, sync=True, reason="tick", delay_s=0.0)
        summary.sync = {"woken": True}
        asked = True
    summary.woken = [root for root in every if root not in recent]
    if summary.woken:
        wake.wake_now(summary.woken, reason="tick")
        asked = True
    if asked:
        wake.dispatched()
    trace.mark("tick_dispatch", sync=wake.WOKEN_SYNC not in recent, trees=len(summary.woken))
    _arm_timer(cluster, now)
    summary.duration_ms = (time.perf_counter() - started) * 1000
    return summary


def react(
    target: str,
    *,
    cluster: Cluster | None = None,
    now: datetime | None = None,
    stamp: float | None = None,
) -> CycleSummary:
    """What a wake runs (queueing.wake), one task per woken thing. See docs/realtime.md.

    - a tree's root: that tree's cycle, nothing else;
    - ``wake.SYNC``: the sync; then the trees it touched (its transitions, registrations,
      configuration), plus the trees waiting for room on the nodes when it moved
      something (``summary.woken``), cycled in this task (``_cycled_here``) -- and, when
      reacts carry their stamps, every tree with a react on its way, whose wake this
      task takes (``wake.take``). The trees are cycled for at most ``KQ_SYNC_PASS_MS``:
      those left are cycled after the sync again (``summary.carried``). Then again,
      while a wake of the sync came meanwhile and the task is under
      ``PASS_BUDGET_INTERVALS`` intervals old (``_sync_pass``);
    - ``wake.ALL``: a wake of each tree, at once.

    ``stamp``: its wake key's value when it was sent; nothing is done if another task
    took that wake and did its work (``wake.claim``)."""
    # Its wake key and the tick's dispatch note, one round trip (two with a stamp).
    if not wake.claim(target, stamp):
        trace.mark("react_taken", target=target)
        return CycleSummary(skipped=[target])
    faults.reach("react.taken")
    cluster = cluster or get_cluster()
    started = time.perf_counter()
    summary = CycleSummary()
    if target == wake.SYNC:
        from django.conf import settings

        budget = started + PASS_BUDGET_INTERVALS * settings.KQ_CYCLE_INTERVAL_S
        while _sync_pass(cluster, now, summary, budget=budget):
            if summary.carried:
                # Trees the pass left when its time was up: the sync again first (what
                # finished meanwhile frees their quota), then them.
                trace.mark("sync_between", carried=len(summary.carried))
                continue
            # A wake of the sync came while this pass ran: its react would wait behind
            # whatever the queue took meanwhile (ticks, trees' reacts). Take it here --
            # while finishes flow: a pass whose sync freed or asked for nothing (jobs
            # that only started) leaves the next wake to its react, which batches more
            # (at full scale the informers wake a sync for every start too).
            if not summary.woken_last:
                break
            again = wake.pending(wake.SYNC) if wake.stamps_taken() else None
            if not isinstance(again, float) or time.perf_counter() >= budget:
                break
            wake.take({wake.SYNC: again})
            trace.mark("sync_again", after_ms=round((time.perf_counter() - started) * 1000, 1))
    elif target == wake.ALL:
        summary.woken = state.roots()
        wake.wake(summary.woken, reason="every tree", delay_s=0.0, fresh=True)
    else:
        _cycle_woken(cluster, [target], now, summary)
    _arm_timer(cluster, now)
    summary.duration_ms = (time.perf_counter() - started) * 1000
    return summary


# A woken sync runs again in its task while wakes of the sync keep coming, for at most
# this many of beat's intervals (then the queue's other tasks get their turn).
PASS_BUDGET_INTERVALS = 1.0


def _sync_pass(
    cluster: Cluster, now: datetime | None, summary: CycleSummary, *, budget: float = 0.0
) -> bool:
    """The sync, then the trees it woke, in this task; whether the sync ran (its lease).

    The trees are cycled in turn for at most ``KQ_SYNC_PASS_MS`` (until ``budget``, the
    task's, allows no more): those left are ``summary.carried``, for the caller to cycle
    after the next sync (with the trees the last pass carried, in front)."""
    from django.conf import settings

    touched: set[str] = set()
    synced = False
    carried, summary.carried = summary.carried, []
    inline: list[str] = []
    try:
        with wake.collecting() as touched:
            synced = _sync(cluster, now, summary, quiet=False)
    except BaseException:
        wake.wake_now(carried, reason="carried")  # the last pass left them: not lost
        raise
    finally:
        # Whatever it committed before any error wakes its trees all the same.
        every = state.roots()
        woken = set(every) if wake.ALL in touched else touched.intersection(every)
        queued: dict[str, Any] = {}
        taking = synced and wake.stamps_taken()
        if touched or taking:
            # Which trees have a react on its way, which wait for node room: one read.
            queued, bound = wake.lookout(every)
            if touched:
                woken |= bound
        woken_now = sorted(woken)
        summary.woken = sorted({*summary.woken, *woken_now})
        summary.woken_last = bool(touched)
        inline = _cycled_here(woken_now, queued, take=taking) if synced else []
        wake.wake_now([root for root in woken_now if root not in inline], reason="sync")
        # The trees the last pass carried come first, cycled whether or not this sync ran.
        inline = [*carried, *(root for root in inline if root not in carried)]
    if not synced:
        wake.wake_busy([wake.SYNC], reason="sync busy")
    else:
        wake.woken_done(wake.WOKEN_SYNC)
    if inline:
        # The trees this sync touched (and those woken meanwhile), cycled now: no broker
        # hop, no wait behind the queue's other tasks for the quota a finish just freed.
        # For at most KQ_SYNC_PASS_MS: then the sync again, which sees what finished while
        # these cycled, before the rest (never past the task's budget, nor without a sync).
        until = None
        clock = time.perf_counter()
        if synced and settings.KQ_SYNC_PASS_MS and clock < budget:
            until = min(budget, clock + settings.KQ_SYNC_PASS_MS / 1000)
        cycled = len(summary.roots)
        try:
            summary.carried = _cycle_woken(
                cluster, inline, now, summary, done=(wake.SYNC,) if synced else (), until=until
            )
        except BaseException:
            wake.wake_now([root for root in inline if root not in summary.roots[cycled:]])
            raise
    elif synced:
        wake.not_busy(wake.SYNC)
    return synced


def _cycle_woken(
    cluster: Cluster,
    roots: list[str],
    now: datetime | None,
    summary: CycleSummary,
    *,
    done: tuple[str, ...] = (),
    until: float | None = None,
) -> list[str]:
    """Cycle trees a wake asked for. A tree whose lease is busy (beat's tick or another
    worker cycles it) is woken again a little later rather than dropped: the holder may
    have read before the change (100 ms, doubling while it stays busy). ``done``: other
    targets that got their lease (the sync before these cycles), noted with them.
    ``until``: no tree is started after it (``time.perf_counter()``) once one was
    cycled; returns those left, for the caller to cycle."""
    left = _cycle_roots(cluster, roots, now, summary, until=until)
    wake.not_busy(*done, *(root for root in roots if root in summary.roots))
    wake.wake_busy([root for root in summary.skipped if root in roots])
    return left


def _cycled_here(roots: list[str], queued: dict[str, Any], *, take: bool = False) -> list[str]:
    """The trees a woken sync cycles itself (KQ_SYNC_CYCLES): of those it touched
    (``roots``), each with no react of its own on the way (``queued``: tree -> its
    stamp; that react will see the change) -- or, with ``take``, every tree it touched
    and every tree with a react on its way, whose wakes it takes (``wake.take``: their
    reacts then find their work done). On a worker that serves the cycle queue alone
    those reacts would wait behind every task queued before them."""
    from django.conf import settings

    if not settings.KQ_SYNC_CYCLES:
        return []
    if not take:
        return [root for root in roots if root not in queued]
    chosen = sorted({*roots, *queued})
    wake.take({root: queued[root] for root in chosen if root in queued})
    return chosen


def waits_for_nodes(result: Any) -> bool:
    """Whether a cycle left work waiting for room on the nodes rather than for quota: no
    placement on the nodes, or short of what the schedulable cluster has left (the
    engine says ``never-fits`` with ``limit="cluster"`` when other trees hold it all)."""
    explanations = result.explanations
    if isinstance(explanations, Explanations):
        return explanations.node_bound()  # without building the explanations not built
    return node_bound_of(explanations)


def _sync(
    cluster: Cluster, now: datetime | None, summary: CycleSummary, *, quiet: bool = True
) -> bool:
    """The sync under its lease; False when another worker holds it. ``quiet``: its own
    changes wake nothing (beat's tick cycles every tree next); else they wake as any
    change does (a woken sync collects them: ``react``)."""
    sync_lease = leases.acquire("sync")
    if sync_lease is None:
        return False
    meter = trace.Meter().start()
    try:
        with wake.suppressed() if quiet else contextlib.nullcontext():
            report: SyncReport = sync_cluster(cluster, now=now, lease=sync_lease)
        trace.mark("sync_cost", **meter.stop())
        summary.sync = report.as_dict()
        summary.errors.extend(report.errors)
    except leases.LeaseLost as exc:
        log.warning("sync dropped: %s", exc)
        summary.skipped.append("sync")
        summary.errors.append(str(exc))
    finally:
        meter.stop()
        leases.release(sync_lease)
    return True


def _cycle_roots(
    cluster: Cluster,
    roots: list[str],
    now: datetime | None,
    summary: CycleSummary,
    *,
    until: float | None = None,
) -> list[str]:
    """Cycle ``roots`` in turn, those whose last cluster calls in this process still run
    last; those not started because ``until`` had passed (after at least one was cycled)
    are returned, their leases released with the pass's."""
    left: list[str] = []
    if not roots:
        return left
    read = time.perf_counter()
    nodes = cluster.nodes()
    listed = time.perf_counter()
    nodeview.persist(nodes)  # what pages, the API and previews read (nodes' room)
    trace.mark(
        "nodes",
        read_ms=round((listed - read) * 1000, 1),
        persist_ms=round((time.perf_counter() - listed) * 1000, 1),
    )
    # What the trees' snapshots read alike, read once for all (the queues, what each tree
    # holds on the nodes, each tree's quotas and the journal after its world's cursor).
    shared = state.PassReads() if len(roots) > 1 else None
    meter = trace.Meter().start()  # the pass's statements, its cycles' included
    # The pass's leases, one statement: each tree whose last calls in this process are
    # done (a tree whose calls still run takes its own lease after them, in its turn).
    ready = [root for root in roots if _calls_done(root)]
    if len(ready) < len(roots):
        # Trees whose calls still run go last, in their order: cycling one waits for its
        # calls first (the main thread idle while the API server answers them), and by
        # its turn they are done, or the pass's time is up and it is left for the next
        # pass, whose first trees are those left.
        ready_set = set(ready)
        roots = [*ready, *(root for root in roots if root not in ready_set)]
    for root in ready:
        _wait_for_calls(root)  # done: only their errors, logged
    held = leases.acquire_many([f"cycle:{root}" for root in ready]) if ready else {}
    release_later: list[leases.Lease] = []
    notes: list[tuple[str, str | None, bool | None, float]] = []
    try:
        if shared is not None:
            mine = [root for root in ready if f"cycle:{root}" in held]
            shared.read_quotas(mine)
            if world.enabled():
                shared.read_journal([world.world_of(root) for root in mine])
        # Each tree's cluster calls run while the next tree cycles (and the next sync).
        for position, root in enumerate(roots):
            if until is not None and notes and time.perf_counter() >= until:
                left = roots[position:]
                break
            lease = held.get(f"cycle:{root}")
            if root in ready and lease is None:
                trace.mark("cycle_busy", root=root)
                summary.skipped.append(root)
                continue
            try:
                applied = cycle_root(
                    root,
                    cluster=cluster,
                    now=now,
                    nodes=nodes,
                    background=True,
                    shared=shared,
                    lease=lease,
                    release_later=release_later,
                )
            except leases.LeaseLost as exc:
                log.warning("cycle of %s dropped: %s", root, exc)
                summary.skipped.append(root)
                continue
            if applied is None:
                trace.mark("cycle_busy", root=root)
                summary.skipped.append(root)
                continue
            # What of the journal it read (its world's cursor, None without worlds) and
            # whether it left work waiting for node room: noted for every tree at once.
            notes.append((root, applied.seen, applied.node_bound, time.time()))
            summary.roots.append(root)
            summary.admitted += len(applied.admitted)
            summary.preempted += len(applied.preempted)
            summary.requeued += len(applied.requeued)
            summary.conflicts += applied.conflicts
            summary.engine_ms += applied.engine_ms
            summary.errors.extend(applied.errors)
    finally:
        # The leases the pass is done with, one statement: every lease it took (those of
        # trees an error kept it from reaching or cut short too) but those of trees whose
        # cluster calls still run in the background, which release theirs when done.
        done = {held.name: held for held in release_later}
        for root in ready:
            taken = held.get(f"cycle:{root}")
            calls = _tree_calls.get(root)
            if taken is not None and (calls is None or calls.done()):
                done.setdefault(taken.name, taken)
        leases.release_many(done.values())
        wake.cycled_many(notes)
        trace.mark("pass", trees=len(roots), cycled=len(notes), left=len(left), **meter.stop())
    return left


def _calls_done(root: str) -> bool:
    """Whether this process's last cycle of ``root`` has no cluster calls still running."""
    pending = _tree_calls.get(root)
    return pending is None or pending.done()


def _arm_timer(cluster: Cluster, now: datetime | None) -> None:
    """A cluster that changes by itself at known instants gets a wake for the next one."""
    if isinstance(cluster, Timed) and wake.enabled():
        try:
            wake.arm_timer(cluster.next_change_at(), now=now)
        except Exception:  # a timer is an optimisation; beat's tick still comes
            log.exception("could not set the cycle's timer")

"""Aging's bound ("starts by T at the latest") is a promise: kept, or its condition named.

The bound is stated for a queue's head: its claim whole by then, and the work now
holding its room ended by then at the latest. It assumes the workload stays the head.
Two things can put work ahead of it: work of higher priority that joins before it has
aged (until then a queue is ordered by priority), and preempted work that queued
before it and returns. In the demo worlds with waves every bound that was broken was
one of these (the head lost its place; the bound was withdrawn), so the sentence names
the condition -- "unless work joins its queue ahead of it" -- and a bound stated while
the workload stays the head is kept: no admission later than the bound its explanation
still stated the cycle before. Work already waiting behind the head can pass it too:
work of lower priority that queued before it ages first and goes ahead; such a head
states no bound.
"""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.bound import tree_holders
from queueing.engine.cycle import Cycle
from queueing.engine.eta_bounds import typical_bound
from queueing.engine.scenarios import demo_world
from queueing.engine.simulator import simulate
from queueing.engine.types import CycleResult, EngineConfig, QueueSpec, Snapshot

from .builders import node, quota, running, snapshot, workload

NOW = 1000.0
EPOCH = 1_700_000_000.0
CYCLE_S = 2.0
CONDITION = "unless work joins its queue ahead of it"


def head_world(now: float, *, newcomer: bool) -> Snapshot:
    """A strict-order queue (aging 300 s): a 4-cpu head queued at ``NOW`` behind a job
    holding 3 of the node's 4 cpu until ``NOW + 600`` (priority 10: nothing here may
    preempt it); with ``newcomer``, a 4-cpu job of priority 10 queued just now."""
    ws = [
        running(1, "q", "n", req={"cpu": 3}, priority=10, started_at=NOW, expected_runtime_s=600.0),
        workload(2, "q", req={"cpu": 4}, expected_runtime_s=50.0, ts=NOW),
    ]
    if newcomer:
        ws.append(workload(3, "q", req={"cpu": 4}, expected_runtime_s=50.0, ts=now, priority=10))
    return snapshot(
        quotas=[quota("root"), quota("q", "root")],
        nodes=[node("n", {"cpu": 4})],
        workloads=ws,
        queues=[QueueSpec("q", policy="Block", aging_bound_s=300.0)],
        now=now,
    )


def test_the_bound_names_its_condition_and_is_withdrawn_when_work_joins_ahead() -> None:
    alone = run_cycle(head_world(NOW + 10, newcomer=False)).explanations[2]
    # Its claim is whole at NOW + 300 (queued at NOW, aging 300 s); the job on the node
    # ends by NOW + 600 at the latest: the bound is the later.
    assert alone.starts_by == NOW + 600
    assert CONDITION in alone.sentence()
    # Higher-priority work joins before it has aged: it goes ahead, and the bound that
    # assumed the head's place is no longer stated for it. The new head states none
    # either: w2, queued before it, ages first and passes it again.
    passed = run_cycle(head_world(NOW + 20, newcomer=True))
    assert passed.explanations[2].starts_by is None
    assert "w3" in passed.explanations[2].sentence()
    assert passed.explanations[3].starts_by is None
    # Once aged, the head keeps its place against any newcomer, and its bound.
    aged = run_cycle(head_world(NOW + 310, newcomer=True))
    assert aged.explanations[2].starts_by is not None
    assert aged.explanations[3].starts_by is None


class _Promises:
    """Per cycle, the bounds stated; per admission, the bound stated the cycle before."""

    def __init__(self) -> None:
        self.stated: dict[int, float] = {}
        self.kept = 0
        self.withdrawn_then_late = 0
        self.ever: dict[int, float] = {}
        self.broken: list[tuple[int, float, float]] = []
        # Per workload, its last bound and when it was stated; a later bound stated the
        # next cycle must be set by work that started since (``bound_since``).
        self.last: dict[int, tuple[float, float]] = {}
        self.moved_by_work_started = 0
        self.moved_unexplained: list[tuple[int, float, float, float]] = []

    def before(self, snap: Snapshot) -> Snapshot:
        return snap

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        before = self.stated
        self.stated = {
            wid: e.starts_by for wid, e in result.explanations.items() if e.starts_by is not None
        }
        for wid, at in self.stated.items():
            self.ever.setdefault(wid, at)
            e = result.explanations[wid]
            prev = self.last.get(wid)
            if prev is not None and wid in before and at > prev[1]:
                if e.bound_since is not None and e.bound_since > prev[0]:
                    self.moved_by_work_started += 1
                else:
                    self.moved_unexplained.append(
                        (wid, snap.now - EPOCH, prev[1] - EPOCH, at - EPOCH)
                    )
            self.last[wid] = (snap.now, at)
        for a in result.admissions:
            held = before.get(a.workload_id)
            first = self.ever.pop(a.workload_id, None)
            if held is not None:
                if snap.now > held + CYCLE_S:
                    self.broken.append((a.workload_id, snap.now - EPOCH, held - EPOCH))
                else:
                    self.kept += 1
            elif first is not None and snap.now > first + CYCLE_S:
                self.withdrawn_then_late += 1


def test_a_bound_stated_while_the_workload_stays_the_head_is_kept() -> None:
    # Twelve minutes of the demo with its waves, two seeds: in both, bounds were
    # withdrawn (work joined ahead) and their workloads started later than once stated.
    watch = _Promises()
    for seed in (2, 6):
        world = demo_world(12.0, seed=seed, waves=True)
        simulate(
            world,
            cycle_interval_s=CYCLE_S,
            config=EngineConfig(cycle_interval_s=CYCLE_S, eta_budget_s=10.0),
            epoch=EPOCH,
            observer=watch,
        )
    assert watch.kept >= 50
    assert watch.withdrawn_then_late >= 1
    assert watch.broken == []
    # Bounds moved later while stated cycle after cycle: by work that started in the
    # tree since, every one (the sentence's condition).
    assert watch.moved_by_work_started >= 1
    assert watch.moved_unexplained == []


def sibling_world(
    now: float, *, admitted_at: float | None, cpus: int = 4, later: bool = False
) -> Snapshot:
    """Quotas a and b under one root, one node of ``cpus`` cpu. a's strict-order queue
    (aging 300 s) has a 4-cpu head queued at ``NOW``; a job of a holds 3 cpu until
    ``NOW + 100``. b's queue has a 1-cpu job with a limit of 600 s: pending, or (with
    ``admitted_at``) running since then; with ``later``, another with a limit of 700 s,
    pending."""
    ws = [
        running(1, "a", "n", req={"cpu": 3}, priority=10, started_at=NOW, expected_runtime_s=100.0),
        workload(2, "a", "qa", req={"cpu": 4}, expected_runtime_s=50.0, ts=NOW),
    ]
    if admitted_at is None:
        ws.append(workload(3, "b", "qb", req={"cpu": 1}, expected_runtime_s=600.0, ts=NOW))
    else:
        ws.append(
            running(3, "b", "n", req={"cpu": 1}, started_at=admitted_at, expected_runtime_s=600.0)
        )
    if later:
        ws.append(workload(4, "b", "qb", req={"cpu": 1}, expected_runtime_s=700.0, ts=NOW + 1))
    return snapshot(
        quotas=[quota("root"), quota("a", "root"), quota("b", "root")],
        nodes=[node("n", {"cpu": cpus})],
        workloads=ws,
        queues=[
            QueueSpec("qa", policy="Block", aging_bound_s=300.0),
            QueueSpec("qb", policy="Block", aging_bound_s=300.0),
        ],
        now=now,
    )


def test_the_bound_counts_what_its_own_cycle_admits_into_the_tree() -> None:
    # The cycle that states the head's bound admits b's job into the same tree: it
    # holds the cpu the head needs until NOW + 610 at the latest. A bound that counted
    # only the work already holding (the job of a, ending by NOW + 100; the claim whole
    # by NOW + 300) said NOW + 300, and the next cycle said NOW + 610: later than "at
    # the latest", with nothing joining the head's queue.
    first = run_cycle(sibling_world(NOW + 10, admitted_at=None))
    assert [a.workload_id for a in first.admissions] == [3]
    stated = first.explanations[2].starts_by
    assert stated == NOW + 610
    after = run_cycle(sibling_world(NOW + 12, admitted_at=NOW + 10)).explanations[2]
    assert after.starts_by is not None
    assert after.starts_by <= stated


def older_behind_world(now: float) -> Snapshot:
    """A strict-order queue (aging 300 s) behind a job holding 3 of the node's 4 cpu
    until ``NOW + 600``: a 4-cpu job of priority 10 queued at ``NOW + 100``, and a
    4-cpu job of priority 0 queued before it, at ``NOW``."""
    return snapshot(
        quotas=[quota("root"), quota("q", "root")],
        nodes=[node("n", {"cpu": 4})],
        workloads=[
            running(
                1, "q", "n", req={"cpu": 3}, priority=10, started_at=NOW, expected_runtime_s=600
            ),
            workload(2, "q", req={"cpu": 4}, expected_runtime_s=50.0, ts=NOW + 100, priority=10),
            workload(3, "q", req={"cpu": 4}, expected_runtime_s=50.0, ts=NOW),
        ],
        queues=[QueueSpec("q", policy="Block", aging_bound_s=300.0)],
        now=now,
    )


def test_no_bound_for_a_head_that_older_work_behind_it_will_pass() -> None:
    # By priority w2 heads the queue, but w3 queued before it: w3 ages at NOW + 300,
    # before w2's claim is whole (NOW + 400), and goes ahead of it. Nothing joins the
    # queue, so "starts by NOW + 600 unless work joins its queue ahead of it" would
    # not hold: no bound is stated for w2 while w3 waits behind it.
    early = run_cycle(older_behind_world(NOW + 150)).explanations
    assert early[2].waiting_ahead == 0
    assert early[3].ahead == (2,)
    assert early[2].starts_by is None
    # Once w3 has aged it is the head, and its own bound holds: nothing can pass it.
    aged = run_cycle(older_behind_world(NOW + 310)).explanations
    assert aged[2].ahead == (3,)
    assert aged[3].starts_by == NOW + 600
    assert CONDITION in aged[2].sentence()  # the head's clause names the condition


def test_a_bound_moved_later_names_the_work_that_started_in_its_tree() -> None:
    # The engine goes on admitting b's work while a's head waits; work that ends after
    # the bound moves it later. The sentence names that condition, and the fields say
    # which work sets the bound and when it started: after the earlier bound was
    # stated, so a watch tells this move from a broken promise.
    first = run_cycle(sibling_world(NOW + 10, admitted_at=None, cpus=5)).explanations[2]
    assert (first.starts_by, first.bound_by, first.bound_since) == (NOW + 610, 3, NOW + 10)
    assert "unless work joins its queue ahead of it or starts in its quota tree" in (
        first.sentence()
    )
    moved = run_cycle(sibling_world(NOW + 12, admitted_at=NOW + 10, cpus=5, later=True))
    assert [a.workload_id for a in moved.admissions] == [4]
    e = moved.explanations[2]
    assert (e.starts_by, e.bound_by, e.bound_since) == (NOW + 712, 4, NOW + 12)
    assert e.bound_since > NOW + 10  # started after the earlier bound was stated
    # Set by work that held the node before the head queued: no move to explain.
    alone = run_cycle(head_world(NOW + 10, newcomer=False)).explanations[2]
    assert (alone.bound_by, alone.bound_since) == (1, NOW)


def test_the_typical_start_beside_the_bound_counts_what_the_cycle_admits_too() -> None:
    # The p50 beside a capped bound (eta.typical_bound) is the same bound with typical
    # runtimes. b's job, admitted by this very cycle, holds the cpu the head needs for
    # up to 600 s, typically the whole of it (no runtime ratio measured): the head's
    # typical start is NOW + 610 too, not the NOW + 300 its claim alone gives.
    cy = Cycle(sibling_world(NOW + 10, admitted_at=None))
    cy.run()
    assert [w.id for w in cy.admitted_ws] == [3]
    assert [w.id for w in tree_holders(cy, cy.tree.chains[cy.quota_of[2]][-1])] == [1, 3]
    assert typical_bound(cy)(2) == NOW + 610

"""Room no candidate of its quota can use this cycle is lent to work that fits it
(queueing/engine/lending.py)."""

from __future__ import annotations

import dataclasses

from queueing.engine import run_cycle
from queueing.engine.cycle import Cycle
from queueing.engine.invariants import check_cycle
from queueing.engine.types import CycleResult, EngineConfig, QueueSpec, Snapshot

from .builders import node, quota, running, snapshot, workload


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu * 1000}


def world(
    *,
    a_max: int = 10,
    b_min: int = 0,
    policy: str = "Priority",
    behind: bool = False,
) -> Snapshot:
    # One 10-cpu node; a and b share it by equal weight: 5 cpu each. a runs 2 cpu and
    # waits with a 4-cpu gang (needs 6), b runs 4 and waits with a 4-cpu gang (needs
    # 8): neither fits its share, and 4 cpu are idle.
    jobs = [
        running(1, "a", "n", req=one(2), started_at=900.0, expected_runtime_s=3600.0),
        running(2, "b", "n", req=one(4), started_at=900.0, expected_runtime_s=3600.0),
        workload(3, "a", req=one(4), ts=990.0, expected_runtime_s=600.0),
        workload(4, "b", req=one(4), ts=991.0, expected_runtime_s=600.0),
    ]
    if behind:
        jobs.append(workload(5, "a", req=one(1), ts=995.0, expected_runtime_s=600.0))
    return snapshot(
        quotas=[
            quota("root"),
            quota("a", "root", max=one(a_max)),
            quota("b", "root", min=one(b_min) if b_min else None, max=one(10)),
        ],
        nodes=[node("n", one(10))],
        queues=[QueueSpec("a", policy=policy), QueueSpec("b", policy=policy)],
        workloads=jobs,
        now=1000.0,
    )


def admitted(result: CycleResult) -> list[int]:
    return [a.workload_id for a in result.admissions]


def test_a_share_its_quota_cannot_use_is_lent_to_a_sibling_it_lets_start() -> None:
    result = run_cycle(world())
    # a's gang is short by 1 cpu, b's by 3: a goes first (fair share) and borrows the
    # 1 cpu of b's share that b's gang cannot use; b's gang still does not fit.
    assert admitted(result) == [3]
    (admission,) = result.admissions
    assert (admission.lent, admission.lent_by) == (one(1), ("b",))
    assert result.runtime_quota["a"] == one(6)
    assert result.runtime_quota["b"] == one(4)
    assert check_cycle(world(), result) == []
    e = result.explanations[4]
    assert (e.kind, e.quota, e.limit) == ("quota", "root", "cluster")  # all 10 cpu in use


def test_a_min_its_quota_does_not_lend_is_never_lent() -> None:
    # c keeps its whole min of 6 (it does not lend), though it runs only 2 and waits
    # for nothing: a's share is what is left, 2, and a's gang waits -- the idle room
    # is c's guarantee, by the admin's choice.
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("a", "root", max=one(10)),
            quota("c", "root", min=one(6), max=one(10), lend=False),
        ],
        nodes=[node("n", one(10))],
        workloads=[
            running(1, "a", "n", req=one(2), started_at=900.0, expected_runtime_s=3600.0),
            running(2, "c", "n", req=one(2), started_at=900.0, expected_runtime_s=3600.0),
            workload(3, "a", req=one(4), ts=990.0, expected_runtime_s=600.0),
        ],
        now=1000.0,
    )
    result = run_cycle(snap)
    assert admitted(result) == []
    assert result.runtime_quota["c"] == one(6)
    assert result.runtime_quota["a"] == one(4)


def test_a_max_bounds_the_borrower_and_the_room_goes_the_other_way() -> None:
    # a may not pass its max of 5: it cannot borrow. b's gang borrows the 3 cpu of a's
    # share that a's gang cannot use.
    snap = world(a_max=5)
    result = run_cycle(snap)
    assert admitted(result) == [4]
    assert result.runtime_quota["a"] == one(2)
    assert result.runtime_quota["b"] == one(8)
    assert check_cycle(snap, result) == []


def test_work_behind_a_strict_order_head_that_borrowed_goes_on_or_names_why_it_waits() -> None:
    snap = world(policy="Block", behind=True)
    result = run_cycle(snap)
    assert admitted(result) == [3]
    # 5 waited behind head 3, which started: it is short of a's share itself now
    # (the root's 10 cpu are all in use now) and says so, naming no blocking head.
    e = result.explanations[5]
    assert (e.kind, e.quota, e.blocked_by) == ("quota", "root", None)
    assert "Blocked behind" not in e.sentence()


def claiming_world(runtime_s: float | None) -> Snapshot:
    # One 4-cpu node; q and r (max 4 each) share it. q runs 2 cpu until t=1890 at the
    # latest, and its head (4 cpu) has waited 13 s of its 300 s aging bound: it cannot
    # start before q's own job ends (2 + 4 passes q's max), and its growing claim
    # holds part of the share. r's 2-cpu job is short of r's share by 1.05 cpu.
    extra = {} if runtime_s is None else {"expected_runtime_s": runtime_s}
    return snapshot(
        quotas=[quota("root"), quota("q", "root", max=one(4)), quota("r", "root", max=one(4))],
        nodes=[node("n", one(4))],
        workloads=[
            running(
                1, "q", "n", req=one(2), priority=9, started_at=990.0, expected_runtime_s=900.0
            ),
            workload(3, "q", req=one(4), priority=9, ts=997.0),
            workload(4, "q", req=one(2), priority=5, ts=998.0),
            workload(5, "r", req=one(2), ts=999.0, **extra),
        ],
        now=1010.0,
    )


def test_an_aged_claim_is_lent_only_to_work_that_ends_before_its_head_can_start() -> None:
    # Declared to end by 1610, before q's head can start (1890): r's job backfills the
    # room the claim holds, and the head's forecast does not move.
    result = run_cycle(claiming_world(600.0))
    assert admitted(result) == [5]
    assert result.admissions[0].lent_by == ("q",)
    assert result.etas[3].p50 == 1890.0
    assert check_cycle(claiming_world(600.0), result) == []
    # Ending after the head could start, or not saying when it ends: the claim holds.
    for runtime_s in (1000.0, None):
        result = run_cycle(claiming_world(runtime_s))
        assert admitted(result) == []
        assert result.runtime_quota["r"] == {"cpu": 950}


def test_a_quota_that_borrows_nothing_is_lent_nothing() -> None:
    # a's shared weight for cpu is 0: the split gives it nothing of the idle room by
    # weight (only what its head's young claim asks), and lending none either.
    snap = world()
    quotas = tuple(
        quota("a", "root", max=one(10), weight={"cpu": 0}) if q.name == "a" else q
        for q in snap.quotas
    )
    snap = dataclasses.replace(snap, quotas=quotas, workloads=snap.workloads[:3])
    result = run_cycle(snap)
    assert admitted(result) == []
    assert result.runtime_quota["a"]["cpu"] < 6000


def test_work_on_lent_room_is_not_evicted_for_the_lenders_work_beyond_its_min() -> None:
    # The next cycle: a's gang runs on 1 cpu of b's share, and b's new 1-cpu job fits
    # b's share but not the full node. b has no min, so it reclaims nothing: its job
    # waits for work to end, as the split's borrowers are never evicted beyond a min.
    first = world()
    assert admitted(run_cycle(first)) == [3]
    jobs = [w for w in first.workloads if w.id != 3]
    jobs.append(running(3, "a", "n", req=one(4), started_at=1000.0, expected_runtime_s=600.0))
    jobs.append(workload(6, "b", req=one(1), priority=9, ts=1001.0, expected_runtime_s=60.0))
    snap = dataclasses.replace(
        first,
        workloads=tuple(jobs),
        now=1002.0,
        queues=(QueueSpec("a"), QueueSpec("b", reclaim="Any", preempt_within_quota="Never")),
    )
    result = run_cycle(snap)
    assert admitted(result) == []
    assert result.preemptions == ()
    assert result.runtime_quota["b"] == one(5)
    e = result.explanations[6]
    assert (e.kind, e.quota, e.limit) == ("quota", "root", "cluster")


def test_what_a_workload_is_said_to_run_on_lent_room_is_never_more_than_it_asks() -> None:
    # 16 cpu on three nodes (8 full with a's work, 4 with b's 1 cpu, 4 free), three
    # quotas of equal weight. b and c wait with 5-cpu pods no node can hold (3 and 4
    # cpu free), within what their quotas can get: the split gives c 5, a and b about
    # 5.5 each -- a runs 8, admitted before the split moved. a's 1-cpu job borrows 3.5
    # cpu of b's and c's shares (a's load 8 + 1 against its 5.5): its own cpu is the
    # one lent to it; the other 2.5 already run.
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("a", "root", max=one(16)),
            quota("b", "root", max=one(16)),
            quota("c", "root", max=one(16)),
        ],
        nodes=[node("n1", one(8)), node("n2", one(4)), node("n3", one(4))],
        workloads=[
            running(1, "a", "n1", req=one(8), started_at=900.0, expected_runtime_s=3600.0),
            running(2, "b", "n2", req=one(1), started_at=900.0, expected_runtime_s=3600.0),
            workload(3, "b", req=one(5), ts=990.0, expected_runtime_s=600.0),
            workload(4, "c", req=one(5), ts=990.5, expected_runtime_s=600.0),
            workload(5, "a", req=one(1), ts=991.0, expected_runtime_s=600.0),
        ],
        # (No aging: the heads' claims would go before the weights.)
        queues=[QueueSpec(name, aging_bound_s=None) for name in ("a", "b", "c")],
        config=EngineConfig(fair_share_mode="instant", preemption=False),
    )
    assert Cycle(snap).limit[1]["cpu"] < 6000  # a's share (5.5 cpu), below its load of 8
    result = run_cycle(snap)
    assert admitted(result) == [5]
    (admission,) = result.admissions
    assert admission.lent == one(1)
    assert set(admission.lent_by) <= {"b", "c"}
    assert check_cycle(snap, result) == []

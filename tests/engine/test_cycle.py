"""The cycle: policies, ordering, fit, preemption, nominations, timeouts, explanations."""

from __future__ import annotations

import dataclasses
import json

import pytest

from queueing.engine import run_cycle
from queueing.engine.types import EngineConfig, QueueSpec, Snapshot, WorkloadSpec

from .builders import node, podset, quota, running, snapshot, workload

CPU = "cpu"


def one(cpu: int) -> dict[str, int]:
    return {CPU: cpu}


def admitted(snap: Snapshot) -> list[int]:
    return [a.workload_id for a in run_cycle(snap, forecast=False).admissions]


def flat(quotas: int = 1, **kw: object) -> list:
    """root + quotas q0..qn-1 with no min/max."""
    return [quota("root")] + [quota(f"q{i}", "root", **kw) for i in range(quotas)]  # type: ignore[arg-type]


# -- queue policies -----------------------------------------------------------------------


def test_priority_policy_skips_a_head_that_does_not_fit() -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(4))],
        workloads=[workload(1, "q0", req=one(8)), workload(2, "q0", req=one(2))],
        queues=[QueueSpec("q0", policy="Priority")],
    )
    assert admitted(snap) == [2]


@pytest.mark.parametrize("policy", ["Block", "FIFO"])
def test_block_policy_blocks_behind_the_head(policy: str) -> None:
    # The head (3) does not fit now (1 of 4 free) but would on the empty node.
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(4))],
        workloads=[
            workload(9, "q0", req=one(3), phase="Running", assignment={"n": one(3)}),
            workload(1, "q0", req=one(3)),
            workload(2, "q0", req=one(1)),
        ],
        queues=[QueueSpec("q0", policy=policy)],
    )
    result = run_cycle(snap, forecast=False)
    assert result.admissions == ()
    assert result.explanations[2].kind == "policy-blocked"
    assert result.explanations[2].blocked_by == 1
    assert result.explanations[2].blocked_by_name == "w1"


@pytest.mark.parametrize("policy", ["Block", "FIFO"])
def test_a_head_that_can_never_fit_is_set_aside_and_blocks_nobody(policy: str) -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(4))],
        workloads=[workload(1, "q0", req=one(8)), workload(2, "q0", req=one(2))],
        queues=[QueueSpec("q0", policy=policy)],
    )
    result = run_cycle(snap)
    assert admitted(snap) == [2]
    never = result.explanations[1]
    assert never.kind == "never-fits"
    assert 1 not in result.positions
    assert 1 not in result.etas


def test_a_workload_set_aside_counts_nothing_in_its_quotas_demand() -> None:
    # Its cpu and memory are within every cap, its GPUs beyond the quota's max: the
    # cycle sums a pending request while it checks it against the chain's cap, and
    # takes back what it had summed when a later resource is beyond it.
    gpu = "nvidia.com/gpu"
    snap = snapshot(
        quotas=[quota("root"), quota("team", "root", max={gpu: 2})],
        nodes=[node("n", {CPU: 8000, "memory": 8 * 2**30, gpu: 8})],
        workloads=[
            workload(1, "team", "q", req={CPU: 1000, "memory": 2**30, gpu: 4}),
            workload(2, "team", "q", req={CPU: 2000}),
        ],
        queues=[QueueSpec("q")],
    )
    assert list(snap.workloads[0].request.raw) == [CPU, "memory", gpu]
    result = run_cycle(snap, forecast=False)
    assert result.explanations[1].kind == "never-fits"
    assert [a.workload_id for a in result.admissions] == [2]
    # Demand: what holds (workload 2, admitted) plus what competes (nothing left).
    assert result.demand["team"].raw == {CPU: 2000}
    assert result.demand["root"].raw == {CPU: 2000}


def test_block_in_a_shared_queue_blocks_only_the_same_quota() -> None:
    quotas = [
        quota("root"),
        quota("interns", "root", max={CPU: 2}),
        quota("staff", "root"),
    ]
    snap = snapshot(
        quotas=quotas,
        nodes=[node("n", one(10))],
        workloads=[
            workload(9, "interns", "shared", req=one(1), phase="Running", assignment={"n": one(1)}),
            workload(1, "interns", "shared", req=one(2)),  # over the interns' max, for now
            workload(2, "interns", "shared", req=one(1)),
            workload(3, "staff", "shared", req=one(1)),
        ],
        queues=[QueueSpec("shared", policy="Block")],
    )
    result = run_cycle(snap, forecast=False)
    assert [a.workload_id for a in result.admissions] == [3]
    assert result.explanations[2].blocked_by == 1


def test_intelligent_blocks_only_at_or_above_the_threshold() -> None:
    def run(head_priority: int) -> list[int]:
        return admitted(
            snapshot(
                quotas=flat(),
                nodes=[node("n", one(4))],
                workloads=[
                    workload(
                        9, "q0", req=one(2), priority=500, phase="Running", assignment={"n": one(2)}
                    ),
                    workload(1, "q0", req=one(3), priority=head_priority),
                    workload(2, "q0", req=one(2), priority=10),
                ],
                # (aging off: an aged head holds its room under any policy)
                queues=[
                    QueueSpec(
                        "q0", policy="Intelligent", priority_threshold=100, aging_bound_s=None
                    )
                ],
            )
        )

    assert run(200) == []
    assert run(100) == []
    assert run(50) == [2]


def test_max_depth_bounds_the_look_ahead() -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(4))],
        workloads=[
            running(9, "q0", "n", req=one(2)),
            workload(1, "q0", req=one(4)),
            workload(2, "q0", req=one(4)),
            workload(3, "q0", req=one(1)),
        ],
        queues=[QueueSpec("q0", max_depth=2, aging_bound_s=None)],
    )
    result = run_cycle(snap, forecast=False)
    assert result.admissions == ()
    assert result.explanations[3].kind == "depth"


def test_queue_order_is_priority_then_timestamp_then_id() -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(2))],
        workloads=[
            workload(1, "q0", req=one(1), ts=5.0),
            workload(2, "q0", req=one(1), ts=1.0),
            workload(3, "q0", req=one(1), ts=9.0, priority=1),
            workload(4, "q0", req=one(1), ts=1.0),
        ],
        queues=[QueueSpec("q0", policy="Block")],
        now=10.0,  # nobody aged yet (aging_bound_s 300): see test_aging_order
    )
    assert admitted(snap) == [3, 2]


# -- ordering across queues -----------------------------------------------------------------


def pool_world(q1_priority: int = 0) -> Snapshot:
    """Quota allows both candidates; the one pool-x node fits only one. Nothing has
    waited its queue's aging bound yet (aged heads go first, oldest first).

    cluster 8 (pool x: 1 cpu, pool y: 7 cpu); q0 and q1 are guaranteed 4 each and
    both demand more, so each runtime quota is 4. q0 holds 1 (score (1+1)/4 = 0.5 with
    its candidate), q1 holds 3 (score 1.0). Candidates and backlog want pool x.
    """
    x = {"pool": "x"}
    return snapshot(
        quotas=flat(2, min=one(4)),
        nodes=[node("nx", one(1), labels=x), node("ny", one(7), labels={"pool": "y"})],
        workloads=[
            running(1, "q0", "ny", req=one(1)),
            running(2, "q1", "ny", req=one(3)),
            workload(10, "q0", req=one(1), ts=5.0, pod_sets=[podset(1, one(1), selector=x)]),
            workload(11, "q0", req=one(4), ts=6.0, pod_sets=[podset(1, one(4), selector=x)]),
            workload(20, "q1", req=one(1), ts=1.0, pod_sets=[podset(1, one(1), selector=x)]),
            workload(21, "q1", req=one(4), ts=2.0, pod_sets=[podset(1, one(4), selector=x)]),
        ],
        queues=[QueueSpec("q0"), QueueSpec("q1", priority=q1_priority)],
        now=60.0,
    )


def test_lowest_fair_share_goes_first() -> None:
    result = run_cycle(pool_world(), forecast=False)
    assert result.runtime_quota["q0"] == {CPU: 4}
    assert result.runtime_quota["q1"] == {CPU: 4}
    assert [a.workload_id for a in result.admissions] == [10]  # although 20 is older
    assert result.explanations[20].kind == "nodes"


def test_queue_priority_beats_fair_share() -> None:
    assert admitted(pool_world(q1_priority=10)) == [20]


def test_tournament_is_rerun_after_every_admission() -> None:
    # Both quotas want 4 x 1 cpu; only 4 fit. Shares alternate, so the admissions do too.
    snap = snapshot(
        quotas=flat(2, min=one(2)),
        nodes=[node("n", one(4))],
        workloads=[workload(i, "q0", req=one(1)) for i in range(1, 5)]
        + [workload(i, "q1", req=one(1)) for i in range(11, 15)],
    )
    assert admitted(snap) == [1, 11, 2, 12]


def test_historical_mode_remembers_past_usage_and_charges_entry_penalty() -> None:
    quotas = flat(2, min=one(4))
    workloads = [workload(1, "q0", req=one(1)), workload(2, "q1", req=one(1), ts=5.0)]
    workloads += [workload(3, "q0", req=one(1), ts=6.0), workload(4, "q1", req=one(1), ts=7.0)]
    cfg = EngineConfig(fair_share_mode="historical", usage_half_life_s=3600)
    base = snapshot(
        quotas=quotas, nodes=[node("n", one(8))], workloads=workloads, config=cfg, now=60.0
    )
    # No history: q0's older workload first, then the entry penalty makes q1 next.
    assert admitted(base) == [1, 2, 3, 4]
    heavy = dataclasses.replace(base, ledger={"q0": {CPU: 1e9}})
    assert admitted(heavy)[:2] == [2, 4]


def test_blended_mode_mixes_instant_and_history() -> None:
    # In pool_world q0 wins on instant share; a heavy ledger for q0 turns it around.
    world = pool_world()
    ledger = {"q0": {CPU: 1e12}}
    blended = dataclasses.replace(
        world, config=EngineConfig(fair_share_mode="blended", blend_alpha=0.5), ledger=ledger
    )
    assert admitted(blended) == [20]
    instant = dataclasses.replace(blended, config=EngineConfig(fair_share_mode="instant"))
    assert admitted(instant) == [10]


# -- fit ---------------------------------------------------------------------------------


def test_quota_chain_limits_every_ancestor() -> None:
    quotas = [
        quota("root"),
        quota("dept", "root", max=one(4)),
        quota("team", "dept"),
        quota("other", "root"),
    ]
    snap = snapshot(
        quotas=quotas,
        nodes=[node("n", one(16))],
        workloads=[
            running(1, "team", "n", req=one(3)),
            workload(2, "team", req=one(2)),
            workload(3, "other", req=one(2)),
        ],
    )
    result = run_cycle(snap, forecast=False)
    assert [a.workload_id for a in result.admissions] == [3]
    assert result.explanations[2].kind == "quota"
    assert result.explanations[2].quota == "dept"
    assert result.explanations[2].shortfall == {CPU: 1}
    assert result.explanations[2].limit == "max"


def test_gang_is_admitted_whole_or_not_at_all() -> None:
    snap = snapshot(
        quotas=flat(),
        # 4 cpu free on each node (of 5): the pods of 3, 3 and 2 fit the empty nodes,
        # not these (on two empty 4-cpu nodes the gang never fits and is set aside).
        nodes=[node("a", one(5)), node("b", one(5))],
        workloads=[
            workload(1, "q0", pod_sets=[podset(2, one(3), name="w"), podset(1, one(2), name="ps")]),
            running(2, "q0", "a", req=one(1)),
            running(3, "q0", "b", req=one(1)),
        ],
        # (aging off: aged, the gang would hold back the nodes' free room for itself)
        queues=[QueueSpec("q0", aging_bound_s=None)],
    )
    result = run_cycle(snap, forecast=False)
    assert result.admissions == ()
    expl = result.explanations[1]
    assert expl.kind == "nodes"
    assert expl.eligible_nodes == 2
    assert expl.largest_free_slot == {CPU: 4}


def test_admission_carries_assignment_placements_and_pool() -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[
            node("g1", {CPU: 8, "nvidia.com/gpu": 4}, labels={"koord-queue/pool": "a100"}),
            node("g2", {CPU: 8, "nvidia.com/gpu": 4}, labels={"koord-queue/pool": "a100"}),
        ],
        workloads=[workload(1, "q0", req={CPU: 2, "nvidia.com/gpu": 2}, count=3)],
    )
    (adm,) = run_cycle(snap, forecast=False).admissions
    assert adm.pool == "a100"
    assert sum(k for _, _, k in adm.placements) == 3
    assert sum(r["nvidia.com/gpu"] for r in adm.assignment.values()) == 6
    json.dumps(adm.to_dict())


# -- preemption ------------------------------------------------------------------------------


def inqueue_world(extra: list[WorkloadSpec] | None = None, **kw: object) -> Snapshot:
    return snapshot(
        quotas=[quota("root"), quota("q0", "root", min=one(4), max=one(4))],
        nodes=[node("n", one(4))],
        workloads=[
            running(1, "q0", "n", req=one(2), priority=1, admitted_at=10.0),
            running(2, "q0", "n", req=one(2), priority=1, admitted_at=20.0),
            workload(3, "q0", req=one(2), priority=5),
            *(extra or []),
        ],
        **kw,  # type: ignore[arg-type]
    )


def test_lower_priority_in_the_same_quota_is_preempted_and_the_preemptor_waits() -> None:
    result = run_cycle(inqueue_world(), forecast=False)
    assert result.admissions == ()  # not in the same cycle as the eviction
    (p,) = result.preemptions
    assert (p.victim_id, p.preemptor_id, p.reason) == (2, 3, "InQueue")  # the newest
    # The preemptor by its name, never its id.
    assert p.message == "preempted by w3 (priority 5 > 1) in quota q0"
    assert result.nominations == (3,)
    assert result.explanations[3].kind == "preempting"
    assert result.explanations[3].victims == (2,)


def test_preemption_never_picks_equal_or_higher_priority() -> None:
    snap = inqueue_world()
    snap = dataclasses.replace(
        snap,
        workloads=tuple(
            dataclasses.replace(w, priority=5) if w.id in (1, 2) else w for w in snap.workloads
        ),
    )
    assert run_cycle(snap, forecast=False).preemptions == ()


def test_queue_may_forbid_preemption() -> None:
    snap = inqueue_world(queues=[QueueSpec("q0", preempt_within_quota="Never", reclaim="Never")])
    assert run_cycle(snap, forecast=False).preemptions == ()


def test_preempted_victim_is_not_chosen_twice_and_capacity_is_kept_for_the_preemptor() -> None:
    snap = inqueue_world(extra=[workload(4, "q0", req=one(2), priority=5, ts=100.0)])
    first = run_cycle(snap, forecast=False)
    assert [(p.victim_id, p.preemptor_id) for p in first.preemptions] == [(2, 3)]

    # Apply: victim 2 is Preempted (eviction requested), 3 is nominated.
    def apply(w: WorkloadSpec) -> WorkloadSpec:
        if w.id == 2:
            return dataclasses.replace(w, phase="Preempted", preempted_by=3)
        if w.id == 3:
            return dataclasses.replace(w, nominated=True)
        return w

    second_snap = dataclasses.replace(snap, workloads=tuple(apply(w) for w in snap.workloads))
    second = run_cycle(second_snap, forecast=False)
    assert second.admissions == ()
    # 4 (same priority as 3) may preempt 1, but never 2 again.
    assert all(p.victim_id != 2 for p in second.preemptions)
    assert 3 in second.nominations
    # The cluster confirms the eviction: 2 is Pending again (original timestamp).
    third_snap = dataclasses.replace(
        second_snap,
        workloads=tuple(
            dataclasses.replace(w, phase="Pending", assignment={}, preempted_by=None)
            if w.id == 2
            else w
            for w in second_snap.workloads
            if w.id != 1 or not second.preemptions
        ),
    )
    third = run_cycle(third_snap, forecast=False)
    adm = [a for a in third.admissions if a.workload_id == 3]
    assert adm
    assert adm[0].nominated


def test_nominated_workload_goes_before_a_higher_ranked_competitor() -> None:
    x = {"pool": "x"}
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root"), quota("q1", "root")],
        nodes=[node("nx", one(2), labels=x), node("ny", one(8))],
        workloads=[
            workload(3, "q0", nominated=True, ts=50.0, pod_sets=[podset(1, one(2), selector=x)]),
            workload(9, "q1", ts=1.0, pod_sets=[podset(1, one(2), selector=x)]),
        ],
        queues=[QueueSpec("q0"), QueueSpec("q1", priority=100)],
    )
    result = run_cycle(snap, forecast=False)
    assert [a.workload_id for a in result.admissions] == [3]
    assert result.admissions[0].nominated
    assert result.nominations == ()


def reclaim_world(b_min: int, *, a_pending: int = 4) -> Snapshot:
    # cluster 8; A (min 4) idle until now; B (min b_min) borrowed all 8.
    return snapshot(
        quotas=[
            quota("root"),
            quota("A", "root", min=one(4)),
            quota("B", "root", min=one(b_min)),
        ],
        nodes=[node("n", one(8))],
        workloads=[
            running(1, "B", "n", req=one(2), admitted_at=1.0),
            running(2, "B", "n", req=one(2), admitted_at=2.0),
            running(3, "B", "n", req=one(2), admitted_at=3.0),
            running(4, "B", "n", req=one(2), admitted_at=4.0),
            workload(5, "A", req=one(a_pending)),
        ],
    )


def test_reclaim_takes_back_borrowed_capacity_from_the_newest_first() -> None:
    result = run_cycle(reclaim_world(b_min=2), forecast=False)
    assert sorted(p.victim_id for p in result.preemptions) == [3, 4]
    assert {p.reason for p in result.preemptions} == {"Reclaim"}
    assert result.runtime_quota["A"] == {CPU: 4}


def test_reclaim_never_takes_a_quota_below_its_min() -> None:
    # B's min is 6: only 2 of its 8 are borrowed; A's 4 cannot all come back.
    result = run_cycle(reclaim_world(b_min=6), forecast=False)
    assert result.preemptions == ()


def test_reclaim_policy_never_and_lower_priority() -> None:
    snap = reclaim_world(b_min=0)
    never = dataclasses.replace(snap, queues=(QueueSpec("A", reclaim="Never"), QueueSpec("B")))
    assert run_cycle(never, forecast=False).preemptions == ()
    lower = dataclasses.replace(
        snap, queues=(QueueSpec("A", reclaim="LowerPriority"), QueueSpec("B"))
    )
    assert run_cycle(lower, forecast=False).preemptions == ()  # all priority 0


def test_victim_set_is_minimal() -> None:
    # Greedy order takes the low-priority small ones first, but only the big one is needed
    # once it is in: add-back drops the small ones.
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root", max=one(8))],
        nodes=[node("n", one(8))],
        workloads=[
            running(1, "q0", "n", req=one(1), priority=1),
            running(2, "q0", "n", req=one(1), priority=1),
            running(3, "q0", "n", req=one(6), priority=2),
            workload(4, "q0", req=one(6), priority=9),
        ],
    )
    result = run_cycle(snap, forecast=False)
    assert [p.victim_id for p in result.preemptions] == [3]


def test_fair_share_preemption_needs_the_preemptor_to_stay_at_or_below_the_victim() -> None:
    # A (min 0) holds 1 of root's 6 and wants 2 more; B (min 0) holds 5 over its
    # runtime 3 (demands: A 3, B 5 -> weights 1:1 -> 3 each). Taking two of B's 1-cpu
    # jobs puts A at 3/3 and leaves B at 3/3: 1 <= 1, allowed, reason FairShare.
    quotas = [
        quota("root"),
        quota("A", "root", weight=one(1)),
        quota("B", "root", weight=one(1)),
    ]
    b_jobs = [running(10 + i, "B", "n", req=one(1), admitted_at=float(i)) for i in range(5)]
    snap = snapshot(
        quotas=quotas,
        nodes=[node("n", one(6))],
        workloads=[running(1, "A", "n", req=one(1)), *b_jobs, workload(2, "A", req=one(2))],
    )
    result = run_cycle(snap, forecast=False)
    assert result.runtime_quota["A"] == {CPU: 3}
    assert [p.reason for p in result.preemptions] == ["FairShare", "FairShare"]
    assert [p.victim_id for p in result.preemptions] == [14, 13]  # newest first
    # Asking for more than A's runtime quota: no other quota's victim would help.
    greedy = dataclasses.replace(
        snap, workloads=(*snap.workloads[:-1], workload(2, "A", req=one(3)))
    )
    assert run_cycle(greedy, forecast=False).preemptions == ()


# -- timeouts and backoff -------------------------------------------------------------------


def test_admission_timeout_requeues_with_backoff() -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(4))],
        workloads=[
            workload(
                1,
                "q0",
                req=one(1),
                phase="Admitted",
                admitted_at=100.0,
                assignment={"n": one(1)},
                attempts=2,
            ),
            workload(
                2, "q0", req=one(1), phase="Admitted", admitted_at=950.0, assignment={"n": one(1)}
            ),
            workload(
                3,
                "q0",
                req=one(1),
                phase="Running",
                admitted_at=100.0,
                started_at=101.0,
                assignment={"n": one(1)},
            ),
        ],
        queues=[QueueSpec("q0", admission_timeout_s=300, backoff_base_s=10, backoff_jitter=0)],
        now=1000.0,
    )
    (rq,) = run_cycle(snap, forecast=False).requeues
    assert rq.workload_id == 1
    assert rq.requeue_at == 1000.0 + 40.0  # third attempt: 10 * 2**2
    assert rq.reason == "AdmissionTimeout"


def test_backoff_competes_only_once_due() -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(4))],
        workloads=[
            workload(1, "q0", req=one(1), phase="Backoff", requeue_at=2000.0),
            workload(2, "q0", req=one(1), phase="Backoff", requeue_at=900.0),
        ],
        now=1000.0,
    )
    result = run_cycle(snap, forecast=False)
    assert [a.workload_id for a in result.admissions] == [2]
    assert result.explanations[1].kind == "backoff"
    assert "until 1970-01-01 00:33:20 UTC" in result.explanations[1].sentence()


# -- explanations ---------------------------------------------------------------------------


def test_explanations_cover_every_waiting_workload_and_serialise() -> None:
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root", max=one(4))],
        nodes=[node("n", one(4))],
        workloads=[
            workload(1, "q0", req=one(3)),
            workload(2, "q0", req=one(3)),
            workload(3, "q0", req=one(5)),
            workload(4, "nope", req=one(1)),
            workload(5, "q0", req=one(1), priority=-1),
        ],
    )
    result = run_cycle(snap)
    waiting = {2, 3, 4, 5} - {a.workload_id for a in result.admissions}
    assert set(result.explanations) >= waiting
    assert result.explanations[3].kind == "never-fits"
    assert result.explanations[4].kind == "unknown-queue"
    for e in result.explanations.values():
        assert e.sentence().endswith(".")
    json.dumps(result.to_dict())


def test_ahead_lists_the_first_workloads_of_the_queue() -> None:
    snap = snapshot(
        quotas=flat(),
        nodes=[node("n", one(2))],
        workloads=[running(99, "q0", "n", req=one(1))]
        + [workload(i, "q0", req=one(2)) for i in range(1, 10)],
        config=EngineConfig(explain_ahead=3, fair_share_mode="instant"),
    )
    result = run_cycle(snap)
    ex = result.explanations
    assert ex[1].ahead == ()
    assert ex[2].ahead == (1,)
    assert ex[9].ahead == (1, 2, 3)
    # The count is the true one, not the length of the list; it agrees with positions.
    assert ex[9].waiting_ahead == 8 == result.positions[9].in_queue - 1
    assert "8 workloads ahead in its queue" in ex[9].sentence()


def test_same_snapshot_same_decisions() -> None:
    snap = inqueue_world(extra=[workload(7, "q0", req=one(1), priority=3)])
    a = run_cycle(snap).to_dict()
    b = run_cycle(snap).to_dict()
    a.pop("stats")
    b.pop("stats")
    assert a == b


def test_fair_share_skips_a_victim_that_would_leave_its_quota_below_the_preemptor() -> None:
    # root 10, A and B weight 1:1 -> runtime 5 each (A wants 5, B holds 6).
    # B's newest job is the 5-cpu one: taking it would leave B at 1/5 while A sits at
    # 5/5 -- not allowed. The older 1-cpu job leaves B at 5/5 >= A's 5/5: that one goes.
    quotas = [quota("root"), quota("A", "root", weight=one(1)), quota("B", "root", weight=one(1))]
    snap = snapshot(
        quotas=quotas,
        nodes=[node("n", one(10))],
        workloads=[
            running(1, "B", "n", req=one(1), admitted_at=1.0),
            running(2, "B", "n", req=one(5), admitted_at=2.0),
            workload(3, "A", req=one(5)),
        ],
    )
    result = run_cycle(snap, forecast=False)
    assert (result.runtime_quota["A"], result.runtime_quota["B"]) == ({CPU: 5}, {CPU: 5})
    assert [(p.victim_id, p.reason) for p in result.preemptions] == [(1, "FairShare")]


def test_quota_explanation_names_preemptible_victims_and_borrowing_headroom() -> None:
    # Preemption is off for the cycle, so 3 stays blocked by q0's runtime quota: 4 of
    # root's 12, because "other" keeps its whole min of 8 (no lending). The hint lists
    # what an in-quota preemption could take (newest lower-priority first) and how
    # much more q0's max (6) would allow than its runtime quota gives it (4).
    base = inqueue_world()
    snap = dataclasses.replace(
        base,
        quotas=(
            quota("root"),
            quota("q0", "root", min=one(4), max=one(6)),
            quota("other", "root", min=one(8), lend=False),
        ),
        nodes=(node("n", one(12)),),
        workloads=(*base.workloads, running(9, "other", "n", req=one(4))),
        config=EngineConfig(fair_share_mode="instant", preemption=False),
    )
    result = run_cycle(snap, forecast=False)
    assert result.runtime_quota["q0"] == {CPU: 4}
    expl = result.explanations[3]
    assert (expl.kind, expl.quota, expl.limit) == ("quota", "q0", "runtime")
    assert expl.shortfall == {CPU: 2}
    # The newest lower-priority workload frees the 2 cpu it lacks: it alone is listed.
    assert expl.victims == (2,)
    assert expl.victim_names == ("w2",)
    assert expl.victims_free == {CPU: 2}
    assert "preempting w2 would free it" in expl.sentence()
    # Idle at the root (12 - 8) and under q0's max (6 - 4): 2 cpu, which its runtime
    # quota leaves to "other"'s unlent minimum -- said so, not "could still borrow".
    assert expl.borrowable == {CPU: 2}
    assert "could" not in expl.sentence()
    assert "2 cpu is idle but its runtime quota leaves it to other quotas" in expl.sentence()


def test_a_snapshot_listing_only_the_heads_decides_as_the_full_one():
    """Long queues listed only to their heads, the rest given as unlisted demand: the
    runtime quotas, and so the admissions, are those of the full snapshot. (The shares,
    16 and 28 cpu, are whole jobs of 2 cpu: no room is left to lend, see lending.py.)"""
    quotas = [
        quota("root", min=res_cpu(44), max=res_cpu(44)),
        quota("a", "root", min=res_cpu(10), max=res_cpu(40), weight=res_cpu(1)),
        quota("b", "root", min=res_cpu(10), max=res_cpu(40), weight=res_cpu(3)),
    ]
    nodes = [node("n1", res_cpu(64))]
    waiting = [workload(i, "a" if i % 2 else "b", req=res_cpu(2)) for i in range(1, 201)]
    full = run_cycle(snapshot(quotas=quotas, nodes=nodes, workloads=waiting))

    heads = {q: [w for w in waiting if w.quota == q] for q in ("a", "b")}

    def listed_to(n: int) -> tuple[list[WorkloadSpec], dict[str, dict[str, int]]]:
        listed = [w for ws in heads.values() for w in ws[:n]]
        unlisted = {q: {"cpu": 2000 * len(ws[n:])} for q, ws in heads.items()}
        return listed, unlisted

    listed, unlisted = listed_to(20)  # deeper than this cycle reaches
    partial = run_cycle(
        snapshot(quotas=quotas, nodes=nodes, workloads=listed, unlisted_demand=unlisted)
    )
    assert partial.runtime_quota == full.runtime_quota
    assert [a.workload_id for a in partial.admissions] == [a.workload_id for a in full.admissions]

    listed, unlisted = listed_to(3)  # shallower: fewer admissions, the same runtime quotas
    short = run_cycle(
        snapshot(quotas=quotas, nodes=nodes, workloads=listed, unlisted_demand=unlisted)
    )
    assert short.runtime_quota == full.runtime_quota
    assert {a.workload_id for a in short.admissions} <= {a.workload_id for a in full.admissions}
    # Without the unlisted demand, the runtime quotas would differ.
    naive = run_cycle(snapshot(quotas=quotas, nodes=nodes, workloads=listed))
    assert naive.runtime_quota != full.runtime_quota


def res_cpu(n: int) -> dict[str, int]:
    return {"cpu": n * 1000}

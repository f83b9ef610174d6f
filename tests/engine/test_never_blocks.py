"""Three livelocks the liveness property test (``test_liveness``) found, in miniature.

Each left an idle cluster and a workload that would start alone waiting for ever:

- a strict-order head asking more than its quota can ever get because siblings that
  lend nothing (``allow_lent`` off) keep their min: it was not set aside, and blocked
  its queue (only a ``max`` or the cluster counted as "never");
- a gang whose pod sets each fit the eligible nodes but not together: not set aside
  either, and as an aged head it held a drain on those nodes for good, so smaller
  work that fits there never started;
- a queue's look-ahead (``max_depth``) filled with work waiting behind its quota's
  blocked head, so work of another quota beyond it -- whose demand held the very
  room the head waited for -- never had a turn.
"""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.resources import Resources
from queueing.engine.types import PodSet, QueueSpec

from .builders import node, quota, running, snapshot, workload


def cpu(n: int) -> dict[str, int]:
    return {"cpu": n * 1000}


def test_a_head_larger_than_what_unlent_siblings_leave_is_set_aside() -> None:
    # 11 cpu; q1 and q2 lend none of their mins (2 + 4). With q0's own 6 the mins pass
    # the 11 and are scaled to it: q0 can get 5.5 at most.
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("q0", "root", min=cpu(6), max=cpu(16), lend=False),
            quota("q1", "root", min=cpu(2), lend=False),
            quota("q2", "root", min=cpu(4), lend=False),
        ],
        nodes=[node("n", cpu(11))],
        workloads=[workload(1, "q0", "Q", req=cpu(7)), workload(2, "q0", "Q", req=cpu(2))],
        queues=[QueueSpec("Q", policy="Block", aging_bound_s=60.0)],
    )
    result = run_cycle(snap)
    e = result.explanations[1]
    assert (e.kind, e.limit, e.quota) == ("never-fits", "lent", "q0")
    assert e.sentence() == (
        "Can never be admitted as specified: it requests 7 cpu but quota q0 can get at "
        "most 5.5 cpu: within root, q1 (2 cpu), q2 (4 cpu) keep their min and lend none of it."
    )
    # The queue moves on: the job behind it starts.
    assert [a.workload_id for a in result.admissions] == [2]
    # When they lend, it fits: nothing is set aside.
    lending = snapshot(
        quotas=[
            quota("root"),
            quota("q0", "root", min=cpu(6), max=cpu(16), lend=False),
            quota("q1", "root", min=cpu(2)),
            quota("q2", "root", min=cpu(4)),
        ],
        nodes=[node("n", cpu(11))],
        workloads=[workload(1, "q0", "Q", req=cpu(7))],
        queues=[QueueSpec("Q", policy="Block", aging_bound_s=60.0)],
    )
    assert [a.workload_id for a in run_cycle(lending).admissions] == [1]


def test_a_gang_whose_pod_sets_fit_the_nodes_only_apart_is_set_aside() -> None:
    # Both pod sets select node n (8 cpu): 4 cpu and 6 cpu, each fits, together not.
    on_n = {"pool": "n"}
    gang = (
        PodSet("a", 2, Resources(cpu(2)), node_selector=on_n),
        PodSet("b", 3, Resources(cpu(2)), node_selector=on_n),
    )
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root")],
        nodes=[node("n", cpu(8), labels=on_n), node("m", cpu(8), labels={"pool": "m"})],
        workloads=[
            workload(1, "q0", "Q", pod_sets=gang, ts=0.0),  # 10 cpu, aged
            workload(
                2,
                "q0",
                "Q",
                pod_sets=(PodSet("p", 1, Resources(cpu(4)), node_selector=on_n),),
                ts=500.0,
            ),
        ],
        queues=[QueueSpec("Q", policy="Priority", aging_bound_s=60.0)],
        now=1000.0,
    )
    result = run_cycle(snap)
    e = result.explanations[1]
    assert e.kind == "never-fits"
    assert "the eligible nodes hold 8 cpu of the 10 cpu its pod sets 'a', 'b' ask" in e.sentence()
    # It holds no drain: the 4-cpu job behind it starts on node n.
    assert [a.workload_id for a in result.admissions] == [2]


def test_work_behind_a_blocked_head_does_not_use_the_look_ahead() -> None:
    # d0 (max 12) over q0 and q1, min 6 each. Queue Q (strict order, look-ahead 2) holds
    # q1's 9-cpu head, a job of q1 behind it, then q0's 6-cpu job: q0's demand keeps 6
    # of d0's 12 for it, so q1's head can never get 9 until that job has run -- and with
    # the look-ahead filled by q1's two workloads, it never got a turn.
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("d0", "root", max=cpu(12)),
            quota("q0", "d0", min=cpu(6)),
            quota("q1", "d0", min=cpu(6)),
        ],
        nodes=[node("n", cpu(16))],
        workloads=[
            workload(1, "q1", "Q", req=cpu(9), ts=1.0),
            workload(2, "q1", "Q", req=cpu(2), ts=2.0),
            workload(3, "q0", "Q", req=cpu(6), ts=3.0),
        ],
        queues=[QueueSpec("Q", policy="Block", max_depth=2, aging_bound_s=0.0)],
    )
    result = run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == [3]
    assert result.explanations[2].kind == "policy-blocked"


def test_a_gang_that_packs_on_no_empty_nodes_is_set_aside() -> None:
    # Pods of 3, 3 and 2 cpu on two 4-cpu nodes: 8 of 8 in all, but no packing.
    gang = (PodSet("w", 2, Resources(cpu(3))), PodSet("ps", 1, Resources(cpu(2))))
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root")],
        nodes=[node("a", cpu(4)), node("b", cpu(4))],
        workloads=[workload(1, "q0", "Q", pod_sets=gang)],
        queues=[QueueSpec("Q", policy="Block")],
    )
    e = run_cycle(snap).explanations[1]
    assert e.kind == "never-fits"
    assert "do not hold its pod sets 'w', 'ps' at once" in e.sentence()


def test_work_that_cannot_start_while_siblings_hold_their_mins_does_not_use_the_look_ahead() -> (
    None
):
    # 8 cpu; a and b keep mins of 4 each for their demand (a runs 2 and waits with 2).
    # b's head asks 6 and c's 6: neither can start while a's demand holds a's min. Queue
    # Q (Priority, look-ahead 2, no aging) lists them before a's 2-cpu job, which fits:
    # counted in the look-ahead, the two heads left it untried for as long as a's
    # demand lasted -- for ever.
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("a", "root", min=cpu(4)),
            quota("b", "root", min=cpu(4)),
            quota("c", "root"),
        ],
        nodes=[node("n", cpu(8))],
        workloads=[
            running(4, "a", "n", req=cpu(2), queue="Q"),
            workload(1, "b", "Q", req=cpu(6), ts=1.0),
            workload(2, "c", "Q", req=cpu(6), ts=2.0),
            workload(3, "a", "Q", req=cpu(2), ts=3.0),
        ],
        queues=[QueueSpec("Q", policy="Priority", max_depth=2, aging_bound_s=None)],
    )
    result = run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == [3]
    assert result.explanations[1].limit == "guarantees"


def test_a_parent_claims_for_its_oldest_head_when_all_its_claims_do_not_fit() -> None:
    # 6 cpu. d0 (min 4) holds q0 (min 2) and q1; d1 holds q2, which lends none of its
    # min of 2. Aged heads: q1's 4-cpu job (the oldest) and q0's 6-cpu job -- together
    # 2 + 4 + 6 - 2 = 10 beyond what d0 could get, so d0 claimed nothing and the weights
    # left it 5: neither head fitted, for ever. q1's head alone needs d0 = 2 + 4 = 6.
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("d0", "root", min=cpu(4), max=cpu(8)),
            quota("q0", "d0", min=cpu(2)),
            quota("q1", "d0", lend=False),
            quota("d1", "root", max=cpu(8)),
            quota("q2", "d1", min=cpu(2), lend=False),
        ],
        nodes=[node("n", cpu(6))],
        workloads=[
            workload(1, "q1", "Q", req=cpu(4), ts=1.0),
            workload(2, "q0", "Q", req=cpu(6), ts=2.0),
            workload(3, "q2", "Q", req=cpu(4), ts=3.0),
        ],
        queues=[QueueSpec("Q", policy="Block", aging_bound_s=20.0)],
    )
    result = run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == [1]
    assert result.runtime_quota["q1"].get("cpu", 0) >= 4000

"""A workload set aside at the cluster (``never-fits``, ``limit="cluster"``) says whether
it can never fit or waits for room that other quota trees hold (issue 11, item 4)."""

from __future__ import annotations

import dataclasses

from queueing.engine import run_cycle
from queueing.engine.calibration import contradictions
from queueing.engine.resources import Resources
from queueing.engine.types import QueueSpec

from .builders import node, quota, snapshot, workload

CPU = "cpu"


def _cycle(request_cpu: int, *, elsewhere: int = 5000):
    # Two 8-cpu nodes; on each, other trees hold ``elsewhere`` cpu (the snapshot counts it
    # in the nodes' reserved and says how much, state.snapshot) and pods the queue does
    # not manage the rest of 6 cpu: 4 cpu are left for this tree.
    nodes = [
        dataclasses.replace(
            node(n, {CPU: 8000}, reserved={CPU: 6000}),
            held_elsewhere=Resources({CPU: elsewhere} if elsewhere else {}),
        )
        for n in ("a", "b")
    ]
    snap = snapshot(
        quotas=[quota("root"), quota("team", "root")],
        nodes=nodes,
        workloads=[workload(1, "team", "q", req={CPU: request_cpu})],
        queues=[QueueSpec("q")],
    )
    result = run_cycle(snap)
    return result, result.explanations[1]


def test_room_held_by_other_trees_is_not_never() -> None:
    result, e = _cycle(6000)
    assert (e.kind, e.limit) == ("never-fits", "cluster")
    assert e.to_free.raw == {CPU: 2000}
    text = e.sentence()
    assert not text.startswith("Can never"), text
    assert text == (
        "Waiting for room held by other quota trees: it requests 6 cpu; other quota trees "
        "hold 10 cpu of the schedulable nodes' 16 cpu (and pods the queue does not manage "
        "2 cpu), leaving 4 cpu: it fits once they release 2 cpu; set aside until then, it "
        "blocks nobody."
    )
    assert contradictions(e, {1: "w1"}, result) == ""


def test_beyond_what_other_trees_would_leave_it_can_never_fit() -> None:
    # 15 cpu: more than the 14 cpu left once other trees' work ends.
    _result, e = _cycle(15000)
    assert (e.kind, e.limit) == ("never-fits", "cluster")
    assert not e.to_free
    assert e.sentence() == (
        "Can never be admitted as specified: it requests 15 cpu but the schedulable "
        "cluster has 16 cpu, 2 cpu of it held by pods the queue does not manage."
    )


def test_room_held_only_by_pods_the_queue_does_not_manage_is_never() -> None:
    _result, e = _cycle(6000, elsewhere=0)
    assert not e.to_free
    assert e.sentence().startswith("Can never be admitted as specified: it requests 6 cpu")


# -- no ETA beside aging's bound -----------------------------------------------------------


def test_a_workload_without_an_eta_beside_a_stated_bound_gets_the_bound_as_its_eta() -> None:
    from queueing.engine.eta_bounds import bound_etas
    from queueing.engine.types import Eta, Explanation

    horizon = "not admitted within the forecast horizon (24 h)"
    bounded = Explanation(1, "quota", starts_by=100.0)
    explanations = {1: bounded, 2: bounded._replace(workload_id=2), 3: Explanation(3, "quota")}
    etas = {
        1: Eta(None, None, reason=horizon),
        2: Eta(None, None, reason=horizon),
        3: Eta(None, None, reason=horizon),  # no bound stated: left as it is
    }
    typical = {1: 70.0, 2: 130.0}.get  # 2's typical start is past the bound
    assert bound_etas(explanations, etas, typical) == 2
    assert (etas[1].p50, etas[1].p90, etas[1].reason) == (70.0, 100.0, "")
    assert (etas[2].p50, etas[2].p90, etas[2].reason) == (100.0, 100.0, "")
    assert (etas[3].p50, etas[3].p90, etas[3].reason) == (None, None, horizon)

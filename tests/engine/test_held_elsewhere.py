"""A workload set aside at the cluster (``never-fits``, ``limit="cluster"``) says whether
it can never fit or waits for room that other quota trees hold (issue 11, item 4)."""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.calibration import contradictions
from queueing.engine.types import QueueSpec

from .builders import node, quota, snapshot, workload

CPU = "cpu"


def _cycle(request_cpu: int):
    # Two 8-cpu nodes; other trees hold 6 cpu of each (the snapshot counts what other
    # trees hold as the nodes' reserved, state.snapshot), so 4 cpu are left for this tree.
    snap = snapshot(
        quotas=[quota("root"), quota("team", "root")],
        nodes=[node(n, {CPU: 8000}, reserved={CPU: 6000}) for n in ("a", "b")],
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
    assert text.startswith("Waiting for room held by other quota trees: it requests 6 cpu;")
    assert "the schedulable nodes have 16 cpu, of which other quota trees" in text
    assert "hold 12 cpu, leaving 4 cpu: it fits once they release 2 cpu" in text
    assert contradictions(e, {1: "w1"}, result) == ""


def test_beyond_every_node_together_it_can_never_fit() -> None:
    result, e = _cycle(20000)
    assert (e.kind, e.limit) == ("never-fits", "cluster")
    assert not e.to_free
    assert e.sentence() == (
        "Can never be admitted as specified: it requests 20 cpu but the schedulable "
        "cluster has 16 cpu (4 cpu of it left for its quota tree)."
    )

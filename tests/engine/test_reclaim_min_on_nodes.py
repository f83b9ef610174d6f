"""A guaranteed minimum on nodes full of work within its owners' runtime quota (issue 11).

The runtime quota counts every schedulable node, but a workload can use only the nodes
it tolerates and selects: the demo's cpu-only jobs have the 16 cpu nodes (496 cores) of
the 992 cpu its quota tree counts. When those nodes are full of a sibling's work that is
within the sibling's runtime quota (the GPU nodes' idle cpu is "shared" with it), nothing
is borrowed by that measure, and a quota under its min waited for as long as the work
ran. A preemptor whose quota fits, whose pods do not place, and whose quota stays within
its min reclaims from quotas using more than their min, on the nodes it needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from queueing.engine import cycle as cycle_mod
from queueing.engine import run_cycle, victim_lists
from queueing.engine.preemption import MAX_EXAMINED_NODES_ONLY
from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario
from queueing.engine.types import (
    EXPLAIN_NODES,
    NodeSpec,
    QueueSpec,
    QuotaNode,
    Taint,
    WorkloadSpec,
)
from tests.engine.builders import (
    arrival,
    node,
    quota,
    running,
    simulate_checked,
    snapshot,
    workload,
)

TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


def world() -> tuple[Scenario, int]:
    quotas = (
        QuotaNode("root"),
        QuotaNode("a", "root", min=Resources({"cpu": 4000}), max={"cpu": 16_000}),
        QuotaNode("b", "root", min=Resources({"cpu": 4000}), max={"cpu": 16_000}),
    )
    queues = (QueueSpec("a"), QueueSpec("b"))
    # 8 cpu that cpu jobs can use, 8 more on a tainted node that none of them tolerates.
    nodes = (
        NodeSpec("cpu", Resources({"cpu": 8000})),
        NodeSpec("gpu", Resources({"cpu": 8000}), taints=(TAINT,)),
    )
    arrivals: list[Arrival] = []

    def add(wid: int, quota: str, at: float, runtime: float, priority: int = 0) -> None:
        arrivals.append(arrival(wid, quota, at, 1, {"cpu": 2000}, runtime, priority=priority))

    # b fills the cpu node for 20 minutes (8 of its runtime quota's 14: within it).
    for i in range(4):
        add(i + 1, "b", 0.0, 1200.0)
    # a, under its min of 4, asks for 2 a minute later; b's priority is higher.
    add(10, "a", 60.0, 30.0, priority=-5)
    return Scenario("reclaim-min", quotas, queues, nodes, tuple(arrivals)), 10


def test_a_quota_under_its_min_reclaims_on_the_nodes_it_can_use() -> None:
    scenario, small = world()
    watched = simulate_checked(scenario)
    seen, reasons = watched.started, watched.evicted
    # Before: it waited for b's work to end (1,200 s). Now one of b's four is evicted
    # (b keeps 6, above its min of 4) and a starts two cycles later.
    assert seen[small] <= 60.0 + 10.0
    assert len(reasons) == 1
    assert (
        "reclaims its guaranteed share from quota b, which uses more than its min" in (reasons[0])
    )
    # The preemptor by its name, never its id (issue 11: names, never ids).
    assert reasons[0].endswith(f"(for a-{small})")


# -- a search on nodes with nothing to win within its budget (counted, not examined) ---

GPU_ONLY = Taint("nvidia.com/gpu", "present", "NoSchedule")


def _reclaim_world(
    useless: int, own: int = 0
) -> tuple[list[QuotaNode], list[NodeSpec], list[WorkloadSpec]]:
    """Team t, within its min, asks 2 cpu; the cpu node is full. Ahead of the one
    useful victim (x's work on the cpu node, x above its min) in victim order come
    ``useless`` workloads of g on the tainted node and ``own`` of t's own there."""
    quotas = [
        quota("root"),
        quota("t", "root", min={"cpu": 8000}, max={"cpu": 64_000}),
        quota("x", "root"),
        quota("g", "root"),
    ]
    nodes = [node("cpu", {"cpu": 4000}), node("gpu", {"cpu": 1_000_000}, taints=[GPU_ONLY])]
    work = [running(1, "x", "cpu", req={"cpu": 4000}, priority=0)]
    work += [running(100 + i, "g", "gpu", req={"cpu": 1000}, priority=-1) for i in range(useless)]
    work += [running(500 + i, "t", "gpu", req={"cpu": 1000}, priority=-1) for i in range(own)]
    work.append(workload(1000, "t", req={"cpu": 2000}, priority=5))
    return quotas, nodes, work


@pytest.mark.parametrize(
    ("useless", "own", "reclaims"), [(31, 0, True), (32, 0, False), (31, 5, True)]
)
def test_the_nodes_only_budget_counts_what_the_search_would_examine(
    useless: int, own: int, reclaims: bool
) -> None:
    # MAX_EXAMINED_NODES_ONLY (32) candidates are examined; the preemptor's own
    # workloads are not candidates and do not count against it.
    assert MAX_EXAMINED_NODES_ONLY == 32
    quotas, nodes, work = _reclaim_world(useless, own)
    result = run_cycle(snapshot(quotas=quotas, nodes=nodes, workloads=work), forecast=False)
    got = [(p.victim_id, p.preemptor_id, p.reason) for p in result.preemptions]
    assert got == ([(1, 1000, "Reclaim")] if reclaims else [])


def test_searches_with_nothing_to_win_on_nodes_do_not_examine_candidates_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Ten teams within their min, each with a 2-cpu pod that does not place: the cpu
    # node is full of work within its quota's min, and the only work above a min sits
    # on a tainted node none of them may use. Each team searches (a sibling with more
    # room may find what another did not), but the reclaim candidates are read once
    # (60k cycle: 1,336 such searches, each examining 32 GPU workloads, were most of
    # the tournament's 3 s).
    teams = [quota(f"t{i}", "root", min={"cpu": 4000}, max={"cpu": 16_000}) for i in range(10)]
    quotas = [quota("root"), quota("h", "root", min={"cpu": 8000}), quota("g", "root"), *teams]
    nodes = [node("cpu", {"cpu": 8000}), node("gpu", {"cpu": 64_000}, taints=[GPU_ONLY])]
    work = [running(1 + i, "h", "cpu", req={"cpu": 2000}) for i in range(4)]
    work += [running(10 + i, "g", "gpu", req={"cpu": 1000}, priority=-1) for i in range(40)]
    work += [workload(100 + i, f"t{i}", req={"cpu": 2000}) for i in range(10)]
    read: list[int] = []
    real_iter = victim_lists.FilteredVictims.__iter__

    def counted(self: Any) -> Iterator[Any]:
        for item in real_iter(self):
            read.append(item[1].id)
            yield item

    searches: list[int] = []
    real_find = cycle_mod.find_victims

    def find(cy: Any, w: WorkloadSpec, qi: int, spec: QueueSpec) -> Any:
        searches.append(w.id)
        return real_find(cy, w, qi, spec)

    monkeypatch.setattr(victim_lists.FilteredVictims, "__iter__", counted)
    monkeypatch.setattr(cycle_mod, "find_victims", find)
    result = run_cycle(snapshot(quotas=quotas, nodes=nodes, workloads=work), forecast=False)
    assert not result.admissions
    assert not result.preemptions
    assert len(searches) == 10
    assert len(read) <= 41  # one pass over the useless head (and the entry after it)
    assert {result.explanations[100 + i].kind for i in range(10)} == {EXPLAIN_NODES}

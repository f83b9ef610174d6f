"""Liveness: every workload that fits the cluster starts (issue 11, item 6).

Aging promises that a workload which fits within its quota's max and the cluster is
admitted within a bounded time. The engine's tests show it in the worlds they build;
here random worlds (``test_simulated_invariants``'s, every queue with an aging bound)
run through the simulator until nothing is left to do, and whatever still waits at
the end must be a workload that does not start even alone on the empty cluster. A
livelock among several workloads -- aged claims that cut each other short on an idle
cluster (:mod:`test_claims_order`), preemptions that undo each other -- leaves a
workload that would start alone waiting for ever: the run ends unfinished and names it.

One kind of wait for ever is the quota model's own, and is recognised rather than
counted (:func:`held_by_guarantees`): on an idle cluster, a parent's room all given
out as its children's guarantees (each at or under its ``min``, for its own waiting
demand) while every child's head asks more than its share. Each head would need a
sibling's min, and a min is held for its quota's demand whenever the parent has
room for every guarantee (the quota invariants, :mod:`.invariants`). 3 of 300 random
worlds end so.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario, Unfinished, simulate
from queueing.engine.types import CycleResult, EngineConfig, Snapshot, WorkloadSpec
from tests.engine.test_simulated_invariants import EPOCH, scenario_from_seed

#: Long enough for every world: at most a few dozen workloads of at most 90 s each,
#: aging bounds of at most 300 s.
HORIZON_S = 2 * 3600.0


def aged_everywhere(seed: int) -> Scenario:
    """``scenario_from_seed(seed)`` with an aging bound on every queue and a declared
    runtime on every workload (the promise is made for work that ends)."""
    scenario = scenario_from_seed(seed)
    rng = random.Random(seed ^ 0xA6E)
    queues = tuple(
        dataclasses.replace(q, aging_bound_s=rng.choice((0.0, 20.0, 120.0, 300.0)))
        for q in scenario.queues
    )
    arrivals = tuple(
        dataclasses.replace(
            a, workload=dataclasses.replace(a.workload, expected_runtime_s=max(a.runtime_s, 30.0))
        )
        for a in scenario.arrivals
    )
    return dataclasses.replace(scenario, queues=queues, arrivals=arrivals)


def starts_alone(scenario: Scenario, w: WorkloadSpec, config: EngineConfig) -> bool:
    """Whether ``w`` is admitted when it is the only workload, on the empty cluster."""
    fresh = dataclasses.replace(w, phase="Pending", assignment={}, queue_order_at=EPOCH)
    alone = dataclasses.replace(scenario, arrivals=(Arrival(0.0, fresh, "w", 1.0),))
    try:
        simulate(alone, cycle_interval_s=3.0, config=config, epoch=EPOCH, max_virtual_s=900.0)
    except Unfinished:
        return False
    return True


def held_by_guarantees(snap: Snapshot, result: CycleResult, wid: int) -> bool:
    """Whether waiting workload ``wid`` (or the head it waits behind) is short of a
    quota whose siblings hold all of their parent's room as guarantees, on an idle
    cluster: every sibling's runtime quota at or under its ``min`` and no more than
    its demand, together the parent's whole runtime quota, in the resource short."""
    if any(v > 0 for used in result.used.values() for v in used.raw.values()):
        return False
    e = result.explanations.get(wid)
    if e is not None and e.kind == "policy-blocked" and e.blocked_by is not None:
        e = result.explanations.get(e.blocked_by)
    if e is None or e.kind != "quota" or e.quota is None or not e.shortfall:
        return False
    quotas = {q.name: q for q in snap.quotas}
    parent = quotas[e.quota].parent
    if parent is None:
        return False
    kids = [q for q in snap.quotas if q.parent == parent]
    rt = result.runtime_quota
    for k in e.shortfall.raw:
        room = rt.get(parent, Resources()).get(k, 0)
        given = 0
        for q in kids:
            got = rt.get(q.name, Resources()).get(k, 0)
            if got > q.min.get(k, 0) or got > result.demand.get(q.name, Resources()).get(k, 0):
                return False
            given += got
        if given < room:
            return False
    return True


def unstarted(seed: int, cycle: str, config: EngineConfig) -> list[str]:
    """Workloads that still wait when the run ends though each would start alone,
    other than those :func:`held_by_guarantees`."""
    scenario = aged_everywhere(seed)
    try:
        simulate(
            scenario,
            cycle=cycle,
            cycle_interval_s=3.0,
            config=config,
            epoch=EPOCH,
            max_virtual_s=HORIZON_S,
        )
    except Unfinished as e:
        stuck = [w for w in e.waiting if starts_alone(scenario, w, config)]
        if e.last is not None:
            snap, result = e.last
            stuck = [w for w in stuck if not held_by_guarantees(snap, result, w.id)]
        return [w.name for w in stuck]
    return []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(("interval", "on-event")),
    st.sampled_from(("instant", "blended")),
)
def test_every_workload_that_starts_alone_starts_among_others(
    seed: int, cycle: str, mode: str
) -> None:
    note(f"world seed {seed}")
    assert unstarted(seed, cycle, EngineConfig(fair_share_mode=mode)) == []

"""The quota invariants in every cycle of random simulated runs (issue 11, item 7).

``test_invariants`` proves them on random worlds and a few cycles applied by hand; here
the same random worlds run through the simulator -- arrivals spread over a minute,
completions, evictions confirmed a cycle later, nominations fed back, aging bounds from
none to immediate, cycles on a timer or woken by events -- with
``simulate(invariants=True)``, which checks :func:`~queueing.engine.invariants.check_cycle`
after every cycle and raises at the first break.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from queueing.engine.invariants import check_cycle
from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, InvariantBroken, Scenario, simulate
from queueing.engine.types import (
    CycleResult,
    EngineConfig,
    NodeSpec,
    QueueSpec,
    QuotaNode,
    Snapshot,
)
from tests.engine.test_invariants import world_from_seed

EPOCH = 1_700_000_000.0


def scenario_from_seed(seed: int) -> Scenario:
    """A random world of ``test_invariants`` as a run: its workloads arrive over 60 s."""
    snap = world_from_seed(seed)
    rng = random.Random(seed ^ 0x5EED)
    queues = tuple(
        dataclasses.replace(q, aging_bound_s=rng.choice((None, 0.0, 20.0, 120.0, 300.0)))
        for q in snap.queues
    )
    arrivals = []
    for w in snap.workloads:
        at = rng.choice((0.0, rng.uniform(0.0, 60.0)))
        fresh = dataclasses.replace(
            w,
            phase="Pending",
            assignment={},
            admitted_at=None,
            started_at=None,
            preempted_by=None,
            nominated=False,
            queue_order_at=EPOCH + at,
            expected_runtime_s=rng.choice((None, 30.0, 90.0)),
        )
        arrivals.append(Arrival(at, fresh, "w", rng.uniform(5.0, 90.0)))
    return Scenario(
        f"world-{seed}", snap.quotas, queues, snap.nodes, tuple(arrivals), resource="cpu"
    )


def run(scenario: Scenario, cycle: str, config: EngineConfig) -> None:
    try:
        simulate(
            scenario,
            cycle=cycle,
            cycle_interval_s=3.0,
            config=config,
            epoch=EPOCH,
            max_virtual_s=1200.0,
            invariants=True,
        )
    except RuntimeError as e:
        # A gang no node can hold waits for ever in a best-effort queue (it blocks
        # nobody); every cycle until then was checked.
        if "did not finish" not in str(e):
            raise


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(("interval", "on-event")),
    st.sampled_from(("instant", "blended")),
)
def test_quota_invariants_hold_in_every_cycle_of_random_simulated_runs(
    seed: int, cycle: str, mode: str
) -> None:
    note(f"world seed {seed}")
    run(scenario_from_seed(seed), cycle, EngineConfig(fair_share_mode=mode))


def test_a_broken_invariant_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Positive control: a cycle whose root gets more than the cluster has stops the run.
    import queueing.engine.simulator as sim

    quotas = (QuotaNode("root"), QuotaNode("a", "root", min=Resources({"cpu": 4})))
    nodes = (NodeSpec("n", Resources({"cpu": 8})),)
    doctored = CycleResult(
        admissions=(),
        preemptions=(),
        requeues=(),
        explanations={},
        positions={},
        etas={},
        runtime_quota={"root": Resources({"cpu": 9})},
        used={},
        demand={},
        shares={},
        stats={},
    )
    empty = Snapshot(now=EPOCH, quotas=quotas, queues=(QueueSpec("a"),), workloads=(), nodes=nodes)
    assert check_cycle(empty, doctored) == [
        "runtime quota of root root (cpu 9) exceeds the cluster 8"
    ]
    w = dataclasses.replace(
        world_from_seed(1).workloads[0], quota="a", queue="a", queue_order_at=EPOCH
    )
    scenario = Scenario("tiny", quotas, (QueueSpec("a"),), nodes, (Arrival(0.0, w, "w", 1.0),))
    monkeypatch.setattr(sim, "run_cycle", lambda snap, forecast=False: doctored)
    with pytest.raises(InvariantBroken, match="exceeds the cluster 8"):
        simulate(scenario, epoch=EPOCH, max_virtual_s=10.0, invariants=True)

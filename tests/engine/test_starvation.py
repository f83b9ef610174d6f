"""No starvation of work that fits (issue 11, item 6): both vision-dev cases, simulated.

The demo's vision subtree: vision (min 32 GPUs) over vision-train (min 24, max 56,
weight by its max) and vision-dev (min 8, max 16, Block). vision-train keeps a
stream of 1-GPU jobs; vision-dev's head is a 4 x 4-GPU gang (16 GPUs). Water-filling
alone gives vision-dev 14 of the 32 GPUs it could share, so the gang never starts and
its Block queue waits behind it for ever. With aging its claim grows to the whole
request within ``aging_bound_s``; the siblings stop borrowing and the gang starts.
The second case: a 128-cpu head over vision-dev's 120-cpu max is set aside with its
reason and the queue behind it moves on.
"""

from __future__ import annotations

import dataclasses

from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario, simulate
from queueing.engine.types import (
    CycleResult,
    EngineConfig,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    WorkloadSpec,
)

GPU = "nvidia.com/gpu"
EPOCH = 1_700_000_000.0


def vision(aging: float | None) -> tuple[Scenario, int, int, int]:
    quotas = (
        QuotaNode("vision", max={GPU: 64, "cpu": 500_000}),
        QuotaNode("vision-train", "vision", min=Resources({GPU: 24}), max={GPU: 56}),
        QuotaNode(
            "vision-dev",
            "vision",
            min=Resources({GPU: 8, "cpu": 40_000}),
            max={GPU: 16, "cpu": 120_000},
        ),
    )
    queues = (
        QueueSpec("vision-train", aging_bound_s=aging),
        QueueSpec("vision-dev", policy="Block", aging_bound_s=aging),
    )
    nodes = tuple(NodeSpec(f"gpu-{i}", Resources({GPU: 8, "cpu": 64_000})) for i in range(5))
    arrivals: list[Arrival] = []
    wid = 0

    def add(at: float, quota: str, pods: int, gpus: int, runtime: float, cpu: int = 1000) -> int:
        nonlocal wid
        wid += 1
        w = WorkloadSpec(
            id=wid,
            name=f"{quota}-{wid}",
            quota=quota,
            queue=quota,
            priority=9000 if quota == "vision-dev" else 5000,
            queue_order_at=EPOCH + at,
            pod_sets=(PodSet("w", pods, Resources({GPU: gpus, "cpu": cpu})),),
            expected_runtime_s=runtime,
        )
        arrivals.append(Arrival(at, w, quota, runtime))
        return wid

    # vision-train: 40 1-GPU jobs at once, then four more every 5 s for ten minutes:
    # always more than the 40 GPUs of the cluster. Water-filling gives vision-dev its
    # min (8) and about 2 of the 8 left over its mins (weights by max: 56 to 16).
    for _ in range(40):
        add(0.0, "vision-train", 1, 1, 60.0)
    for i in range(480):
        add(5.0 * (i // 4), "vision-train", 1, 1, 60.0)
    gang = add(100.0, "vision-dev", 4, 4, 60.0)
    never = add(101.0, "vision-dev", 8, 0, 60.0, cpu=16_000)  # 128 cpu > max 120
    behind = add(102.0, "vision-dev", 1, 1, 30.0)
    return (
        dataclasses.replace(
            Scenario("vision", quotas, queues, nodes, tuple(arrivals)),
            measured={"vision-train": 24, "vision-dev": 8},
            resource=GPU,
        ),
        gang,
        never,
        behind,
    )


def admitted_at(scenario: Scenario, ids: tuple[int, ...]) -> dict[int, float]:
    seen: dict[int, float] = {}

    class Watch:
        def before(self, snap: Snapshot) -> Snapshot:
            return snap

        def after(self, snap: Snapshot, result: CycleResult) -> None:
            for a in result.admissions:
                if a.workload_id in ids:
                    seen.setdefault(a.workload_id, snap.now - EPOCH)
            for wid in ids:
                e = result.explanations.get(wid)
                if e is not None and e.kind == "never-fits":
                    seen.setdefault(-wid, snap.now - EPOCH)
                    assert "128 cpu" in e.sentence()
                    assert "120 cpu" in e.sentence()

    simulate(
        scenario,
        cycle_interval_s=5.0,
        config=EngineConfig(fair_share_mode="instant"),
        epoch=EPOCH,
        max_virtual_s=4000.0,
        observer=Watch(),
    )
    return seen


def test_the_gang_starves_without_aging_and_starts_within_the_bound_with_it() -> None:
    scenario, gang, never, behind = vision(aging=None)
    without = admitted_at(scenario, (gang, never, behind))
    # Positive control: water-filling alone gives vision-dev its min (8 GPUs) and
    # vision-train the rest; the 16-GPU gang waits as long as vision-train has work
    # (600 s of arrivals), and the Block queue behind it too.
    assert without.get(gang, 1e9) > 600.0
    assert without.get(behind, 1e9) > 600.0
    scenario, gang, never, behind = vision(aging=120.0)
    with_aging = admitted_at(scenario, (gang, never, behind))
    # Claim whole at 100 + 120 s; vision-train's 60 s jobs then end without successors.
    assert with_aging[gang] <= 100.0 + 120.0 + 60.0 + 10.0
    # The job behind the gang follows it (once the gang's 60 s free vision-dev's max),
    # not held by the set-aside 128-cpu job.
    assert with_aging[gang] <= with_aging[behind] <= with_aging[gang] + 60.0 + 5.0


def test_a_head_beyond_its_max_is_set_aside_and_the_queue_moves_on() -> None:
    scenario, gang, never, behind = vision(aging=120.0)
    seen = admitted_at(scenario, (gang, never, behind))
    assert never not in seen  # never admitted
    assert seen[-never] <= 101.0 + 5.0  # set aside at its first cycle, with its numbers
    assert behind in seen

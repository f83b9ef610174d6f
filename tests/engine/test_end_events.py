"""The running work's ends that the drains sweep (CycleState.end_events): in time order,
only on the eligible nodes, sorted only as far as they are read (SortedAsRead)."""

from __future__ import annotations

import itertools
import random

from queueing.engine.cycle import Cycle
from queueing.engine.cyclestate import SortedAsRead
from queueing.engine.nodes import EligKey
from queueing.engine.types import Taint

from .builders import node, quota, running, snapshot


def test_reads_of_any_length_in_any_interleaving_see_the_sorted_items() -> None:
    rng = random.Random(7)
    items = [
        (rng.choice([1.0, 2.0, 3.5, 9.0]), rng.randrange(5), rng.randrange(3)) for _ in range(60)
    ]
    events = SortedAsRead(list(items))
    first = iter(events)
    head = list(itertools.islice(first, 5))  # a sweep that stopped early
    second = list(events)  # a later sweep reads all of it
    rest = list(first)  # the first one, resumed
    assert head == sorted(items)[:5]
    assert second == sorted(items)
    assert head + rest == sorted(items)
    assert list(SortedAsRead([])) == []


def test_the_ends_are_the_eligible_nodes_work_by_latest_and_typical_end() -> None:
    gpu_taint = Taint(key="gpu", value="yes", effect="NoSchedule")
    snap = snapshot(
        quotas=[quota("root"), quota("a", "root")],
        nodes=[
            node("n1", {"cpu": 8000}),
            node("n2", {"cpu": 8000}),
            node("g", {"cpu": 8000}, taints=[gpu_taint]),  # not eligible without toleration
        ],
        workloads=[
            # Declared 600 s, started at 900: ends at 1500 at the latest.
            running(1, "a", "n1", req={"cpu": 2000}, started_at=900.0, expected_runtime_s=600.0),
            # Declared 100 s, started at 800: overdue, counted as ending now (1000).
            running(2, "a", "n2", req={"cpu": 3000}, started_at=800.0, expected_runtime_s=100.0),
            running(3, "a", "g", req={"cpu": 4000}, started_at=900.0, expected_runtime_s=50.0),
        ],
        now=1000.0,
        # Queue a's work typically runs half its declared runtime.
        runtime_ratio={"a": (0.5, 0.9)},
    )
    cy = Cycle(snap)
    plain: EligKey = ((), ())
    n1, n2 = cy.nodes.index["n1"], cy.nodes.index["n2"]
    assert list(cy.end_events(plain, "cpu")) == [(1000.0, n2, 3000), (1500.0, n1, 2000)]
    # Typical ends: half the declared runtime (job 1 at 900 + 300), never before now.
    assert list(cy.end_events(plain, "cpu", typical=True)) == [
        (1000.0, n2, 3000),
        (1200.0, n1, 2000),
    ]
    assert list(cy.end_events(plain, "memory")) == []
    # Made once per cycle and key: the same object, read again from its start.
    assert cy.end_events(plain, "cpu") is cy.end_events(plain, "cpu")

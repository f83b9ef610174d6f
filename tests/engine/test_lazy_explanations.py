"""The explanations a cycle hands out unbuilt (``forecast=False``) are those built at once.

:class:`queueing.engine.lazy_explanations.Explanations` builds a queue's explanations when one of
them is first read. Whatever the order of reading, each must equal what
:func:`queueing.engine.explain.explain_all` gives for the same end state, and the
mapping must hold exactly those workloads, in the same order.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

from queueing.engine import run_cycle
from queueing.engine.cycle import Cycle
from queueing.engine.explain import explain_all, node_bound_of
from queueing.engine.lazy_explanations import Explanations
from queueing.engine.scenarios import synthetic_snapshot
from queueing.engine.types import Snapshot
from queueing.engine.victim_lists import OrderedVictims


@pytest.fixture(scope="module")
def world() -> Snapshot:
    # Busy enough for every kind: quota, nodes, blocked, preempting, depth, never.
    return synthetic_snapshot(3_000, 120, 150, seed=7)


def _ran(snap: Snapshot) -> Cycle:
    cy = Cycle(snap)
    cy.run()
    return cy


def test_read_in_any_order_they_equal_the_eager_build(world: Snapshot) -> None:
    eager = explain_all(_ran(world))
    kinds = {e.kind for e in eager.values()}
    assert {"quota", "nodes", "policy-blocked"} <= kinds  # the world exercises them
    ids = list(eager)
    rng = random.Random(3)
    rng.shuffle(ids)
    lazy = Explanations(_ran(world))
    for wid in ids:
        assert lazy[wid] == eager[wid]
    assert len(lazy) == len(eager)
    assert list(lazy) == list(eager)
    assert list(lazy.items()) == list(eager.items())
    assert lazy == eager


def test_unread_they_are_not_built_and_the_state_goes_once_all_are(world: Snapshot) -> None:
    cy = _ran(world)
    lazy = Explanations(cy)
    first = next(iter(lazy.values()))
    assert first.workload_id == next(iter(explain_all(cy)))
    built = sum(part is not None for part in lazy._parts)
    assert built == 1  # the first queue only
    assert lazy._cy is cy
    assert lazy.get(-12345) is None
    assert -12345 not in lazy
    with pytest.raises(KeyError):
        lazy[-12345]
    assert len(list(lazy.values())) == len(lazy)
    assert lazy._cy is None  # all built: the cycle's state is let go


def test_a_cycle_without_forecast_hands_them_out_unbuilt_and_pickles_as_a_dict(
    world: Snapshot,
) -> None:
    result = run_cycle(world, forecast=False)
    assert isinstance(result.explanations, Explanations)
    with_forecast = run_cycle(world, forecast=True)
    assert isinstance(with_forecast.explanations, dict)
    copy = pickle.loads(pickle.dumps(result.explanations))  # noqa: S301 (our own bytes)
    assert type(copy) is dict
    assert copy == dict(result.explanations.items())
    assert result.to_dict()["explanations"] == with_forecast.to_dict()["explanations"]


def test_the_victim_order_read_lazily_is_the_sorted_order() -> None:
    rng = random.Random(11)
    entries: list[Any] = [
        ((rng.randrange(5), -rng.random(), -i), object(), i % 7) for i in range(500)
    ]
    ordered = OrderedVictims(list(entries))
    expect = sorted(entries, key=lambda e: e[0])
    assert len(ordered) == 500
    assert [ordered[p] for p in range(40)] == expect[:40]
    assert ordered[499] == expect[499]
    assert [ordered[p] for p in range(500)] == expect
    with pytest.raises(IndexError):
        ordered[500]


@pytest.mark.parametrize(
    ("shape", "expect"),
    [
        # nodes full: kind="nodes" among them
        ((3_000, 120, 150, {"seed": 7}), True),
        # room on the nodes, quota short at the root with the cluster's all lent out:
        # limit="cluster" and no kind="nodes" at all
        ((2_000, 60, 400, {"seed": 3, "running_fill": 0.2}), True),
        ((500, 20, 5, {"seed": 1}), True),
        # plenty of room on the nodes: quota, policy and preemption only
        ((2_000, 60, 2_000, {"seed": 5, "running_fill": 0.0}), False),
        ((1_500, 40, 1_000, {"seed": 2, "running_fill": 0.5}), False),
    ],
)
def test_node_bound_says_what_the_built_explanations_say_and_builds_none(
    shape: tuple[int, int, int, dict[str, Any]], expect: bool
) -> None:
    pending, queues, nodes, kw = shape
    snap = synthetic_snapshot(pending, queues, nodes, **kw)
    eager = explain_all(_ran(snap))
    assert node_bound_of(eager) is expect
    lazy = Explanations(_ran(snap))
    assert lazy.node_bound() is expect
    assert all(part is None for part in lazy._parts)  # none was built for it
    if shape[3].get("seed") == 3:
        # the case that only limit="cluster" makes node-bound
        assert not any(e.kind == "nodes" for e in eager.values())
    # Once all are built it answers from them, the same.
    assert lazy.materialize().node_bound() is expect
    assert lazy._cy is None

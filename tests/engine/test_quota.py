"""Runtime quota by Koordinator's rule, against tables computed by hand."""

from __future__ import annotations

import pytest

from queueing.engine.quota import QuotaTree, hamilton, waterfill
from queueing.engine.resources import Resources
from queueing.engine.types import QuotaNode

from .builders import quota


def runtime_of(
    quotas: list[QuotaNode], own: dict[str, dict[str, int]], cluster: dict[str, int]
) -> dict[str, dict[str, int]]:
    tree = QuotaTree(quotas)
    own_list = [own.get(name, {}) for name in tree.names]
    rt, _ = tree.runtime(own_list, cluster)
    return {name: rt[i] for i, name in enumerate(tree.names)}


# -- hamilton and waterfill ------------------------------------------------------------


def test_hamilton_sums_exactly_and_breaks_ties_by_name() -> None:
    assert hamilton(10, [1, 1, 1], ["c", "a", "b"]) == [3, 4, 3]
    assert hamilton(7, [2, 0, 5], ["a", "b", "c"]) == [2, 0, 5]
    assert hamilton(0, [1, 2], ["a", "b"]) == [0, 0]
    assert hamilton(5, [0, 0], ["a", "b"]) == [0, 0]


def test_hamilton_is_exact_for_huge_memory_values() -> None:
    total = 3 * 2**60 + 1  # far beyond float precision
    parts = hamilton(total, [1, 1, 1], ["a", "b", "c"])
    assert sum(parts) == total
    assert max(parts) - min(parts) <= 1


def test_waterfill_scales_overcommitted_bases() -> None:
    # bases 80 + 60 > 100: split 100 in proportion 80:60 = 57.14 : 42.86.
    # Remainders: 8000 mod 140 = 20, 6000 mod 140 = 120 -> the residual unit goes to b.
    assert waterfill(100, [80, 60], [100, 100], [1, 1], ["a", "b"]) == [57, 43]


# -- single level ------------------------------------------------------------------------


def test_single_level_water_fill_by_weight() -> None:
    # cluster 100. Bases: A min(20,50)=20, B min(30,10)=10, C min(10,50)=10 -> 40 used.
    # Remainder 60 between A (w1, cap 50) and C (w2, cap 50): A +20 = 40, C +40 = 50.
    quotas = [
        quota("root"),
        quota("A", "root", min={"cpu": 20}, max={"cpu": 60}, weight={"cpu": 1}),
        quota("B", "root", min={"cpu": 30}, max={"cpu": 100}, weight={"cpu": 1}),
        quota("C", "root", min={"cpu": 10}, max={"cpu": 50}, weight={"cpu": 2}),
    ]
    rt = runtime_of(quotas, {"A": {"cpu": 50}, "B": {"cpu": 10}, "C": {"cpu": 50}}, {"cpu": 100})
    assert rt["root"] == {"cpu": 100}
    assert (rt["A"], rt["B"], rt["C"]) == ({"cpu": 40}, {"cpu": 10}, {"cpu": 50})


def test_demand_below_min_lends_the_rest() -> None:
    # A is guaranteed 50 but wants 10: with lending, B borrows the other 40.
    quotas = [
        quota("root"),
        quota("A", "root", min={"cpu": 50}, max={"cpu": 100}),
        quota("B", "root", min={"cpu": 0}, max={"cpu": 100}),
    ]
    rt = runtime_of(quotas, {"A": {"cpu": 10}, "B": {"cpu": 100}}, {"cpu": 100})
    assert (rt["A"], rt["B"]) == ({"cpu": 10}, {"cpu": 90})


def test_lending_off_keeps_the_whole_min() -> None:
    quotas = [
        quota("root"),
        quota("A", "root", min={"cpu": 50}, max={"cpu": 100}, lend=False),
        quota("B", "root", min={"cpu": 0}, max={"cpu": 100}),
    ]
    rt = runtime_of(quotas, {"A": {"cpu": 10}, "B": {"cpu": 100}}, {"cpu": 100})
    assert (rt["A"], rt["B"]) == ({"cpu": 50}, {"cpu": 50})


def test_lending_off_with_demand_above_min_still_borrows() -> None:
    # A (no lending) min 30 wants 60; B min 10 wants 100. Bases 30 + 10, remainder 60
    # split 1:1 -> A +30 = 60 (its demand), B +30 = 40.
    quotas = [
        quota("root"),
        quota("A", "root", min={"cpu": 30}, max={"cpu": 100}, weight={"cpu": 1}, lend=False),
        quota("B", "root", min={"cpu": 10}, max={"cpu": 100}, weight={"cpu": 1}),
    ]
    rt = runtime_of(quotas, {"A": {"cpu": 60}, "B": {"cpu": 100}}, {"cpu": 100})
    assert (rt["A"], rt["B"]) == ({"cpu": 60}, {"cpu": 40})


def test_zero_weight_borrows_nothing() -> None:
    # Bases 10 + 10; remainder 80 all to B (w1) up to its demand 60; A (w0) stays at 10.
    quotas = [
        quota("root"),
        quota("A", "root", min={"cpu": 10}, max={"cpu": 100}, weight={"cpu": 0}),
        quota("B", "root", min={"cpu": 10}, max={"cpu": 100}, weight={"cpu": 1}),
    ]
    rt = runtime_of(quotas, {"A": {"cpu": 60}, "B": {"cpu": 60}}, {"cpu": 100})
    assert (rt["A"], rt["B"]) == ({"cpu": 10}, {"cpu": 60})


def test_rounding_residual_goes_to_largest_remainder_then_name() -> None:
    quotas = [quota("root")] + [
        quota(n, "root", max={"cpu": 10}, weight={"cpu": 1}) for n in ("c", "a", "b")
    ]
    rt = runtime_of(quotas, {n: {"cpu": 10} for n in "abc"}, {"cpu": 10})
    assert (rt["a"], rt["b"], rt["c"]) == ({"cpu": 4}, {"cpu": 3}, {"cpu": 3})


def test_default_shared_weight_is_max_like_koordinator() -> None:
    # No explicit weights: weight = max (A 100, B 300). Remainder 80 (both min 0)
    # split 1:3 -> A 20, B 60.
    quotas = [
        quota("root"),
        quota("A", "root", max={"cpu": 100}),
        quota("B", "root", max={"cpu": 300}),
    ]
    rt = runtime_of(quotas, {"A": {"cpu": 100}, "B": {"cpu": 100}}, {"cpu": 80})
    assert (rt["A"], rt["B"]) == ({"cpu": 20}, {"cpu": 60})
    assert quotas[1].weight("cpu") == 100
    assert quotas[1].weight("memory") == 1  # not in max, no min -> 1


def test_overcommitted_mins_are_scaled_not_exceeded() -> None:
    quotas = [
        quota("root"),
        quota("A", "root", min={"cpu": 80}),
        quota("B", "root", min={"cpu": 60}),
    ]
    rt = runtime_of(quotas, {"A": {"cpu": 100}, "B": {"cpu": 100}}, {"cpu": 100})
    assert (rt["A"], rt["B"]) == ({"cpu": 57}, {"cpu": 43})


def test_root_capacity_is_min_of_max_and_cluster() -> None:
    quotas = [quota("r1", max={"cpu": 40}), quota("r2")]
    rt = runtime_of(quotas, {}, {"cpu": 100, "memory": 7})
    assert rt["r1"] == {"cpu": 40, "memory": 7}  # memory: no ceiling of its own
    assert rt["r2"] == {"cpu": 100, "memory": 7}


# -- multi level -------------------------------------------------------------------------


def test_two_level_tree() -> None:
    # cluster 120. Root splits D1 (wants 90) and D2 (wants 20): bases 60 + 20, the 40
    # left all go to D1 but it only wants 90 -> D1 90, D2 20 (10 stays idle).
    # D1 splits 90: a1 base 30, a2 base 10, remainder 50 -> a1 80. D2 gives b1 its 20.
    quotas = [
        quota("root"),
        quota("D1", "root", min={"cpu": 60}, max={"cpu": 120}),
        quota("D2", "root", min={"cpu": 60}, max={"cpu": 120}),
        quota("a1", "D1", min={"cpu": 30}, max={"cpu": 120}),
        quota("a2", "D1", min={"cpu": 30}, max={"cpu": 120}),
        quota("b1", "D2", min={"cpu": 60}, max={"cpu": 60}),
    ]
    own = {"a1": {"cpu": 80}, "a2": {"cpu": 10}, "b1": {"cpu": 20}}
    rt = runtime_of(quotas, own, {"cpu": 120})
    assert rt["D1"] == {"cpu": 90}
    assert rt["D2"] == {"cpu": 20}
    assert rt["a1"] == {"cpu": 80}
    assert rt["a2"] == {"cpu": 10}
    assert rt["b1"] == {"cpu": 20}


def test_three_level_tree_with_max_caps_at_every_level() -> None:
    # cluster 100; T (max 50) caps its subtree's demand at 50 although leaves want 90.
    # Root: T base min(20, 50)=20, U base min(0, 70)=0; remainder 80 by weights 1:1:
    # T +40 -> 60 > cap 50 -> T 50 (surplus 10); U +40 = 40, then +10 -> U 50.
    # Inside T (50): t1 min 10 wants 60, t2 min 10 wants 30 (t2 max 20 caps it at 20):
    # bases 10 + 10, remainder 30 by 1:1 -> t1 +15 = 25, t2 +15 = 25 > cap 20 ->
    # t2 20 (surplus 5) -> t1 30. Inside t1 (30): leaf x wants 60 -> 30.
    quotas = [
        quota("root"),
        quota("T", "root", min={"cpu": 20}, max={"cpu": 50}, weight={"cpu": 1}),
        quota("U", "root", max={"cpu": 100}, weight={"cpu": 1}),
        quota("t1", "T", min={"cpu": 10}, max={"cpu": 100}, weight={"cpu": 1}),
        quota("t2", "T", min={"cpu": 10}, max={"cpu": 20}, weight={"cpu": 1}),
        quota("x", "t1", max={"cpu": 100}),
    ]
    own = {"x": {"cpu": 60}, "t2": {"cpu": 30}, "U": {"cpu": 70}}
    rt = runtime_of(quotas, own, {"cpu": 100})
    assert rt["T"] == {"cpu": 50}
    assert rt["U"] == {"cpu": 50}
    assert rt["t1"] == {"cpu": 30}
    assert rt["t2"] == {"cpu": 20}
    assert rt["x"] == {"cpu": 30}


def test_resources_absent_from_a_quota() -> None:
    # A caps cpu at 50 but names no memory (unbounded); B names nothing.
    # cpu: weights A=50 (its max), B=1 (no max, no min). Remainder 100 -> A 98 capped
    # at 50 (surplus 48) and B 2, then B alone +48 -> 50.
    # memory: weights 1:1 (neither names it): 200 -> A 100 (its demand), B 100.
    quotas = [quota("root"), quota("A", "root", max={"cpu": 50}), quota("B", "root")]
    own = {"A": {"cpu": 80, "memory": 100}, "B": {"cpu": 80, "memory": 150}}
    rt = runtime_of(quotas, own, {"cpu": 100, "memory": 200})
    assert rt["A"] == {"cpu": 50, "memory": 100}
    assert rt["B"] == {"cpu": 50, "memory": 100}


def test_inner_quota_workloads_are_served_before_children() -> None:
    quotas = [quota("root"), quota("P", "root"), quota("C", "P")]
    rt = runtime_of(quotas, {"P": {"cpu": 30}, "C": {"cpu": 100}}, {"cpu": 100})
    assert rt["C"] == {"cpu": 70}


def test_children_never_exceed_parent_runtime_nor_their_max() -> None:
    quotas = [
        quota("root"),
        quota("A", "root", min={"cpu": 5}, max={"cpu": 30, "memory": 10}),
        quota("B", "root", min={"cpu": 5, "memory": 3}),
        quota("C", "root", max={"memory": 4}, lend=False, min={"memory": 4}),
    ]
    own = {"A": {"cpu": 70, "memory": 20}, "B": {"cpu": 70, "memory": 20}, "C": {"cpu": 1}}
    rt = runtime_of(quotas, own, {"cpu": 50, "memory": 12})
    for r in ("cpu", "memory"):
        assert sum(rt[n].get(r, 0) for n in "ABC") <= rt["root"][r]
    assert rt["A"]["cpu"] <= 30
    assert rt["A"].get("memory", 0) <= 10
    assert rt["C"] == {"cpu": 1, "memory": 4}


def test_tree_errors_are_loud() -> None:
    with pytest.raises(ValueError, match="unknown parent"):
        QuotaTree([quota("a", "nope")])
    with pytest.raises(ValueError, match="twice"):
        QuotaTree([quota("a"), quota("a")])
    with pytest.raises(ValueError, match="cycle"):
        QuotaTree([quota("a", "b"), quota("b", "a")])


def test_lca_and_chains() -> None:
    tree = QuotaTree([quota("r"), quota("x", "r"), quota("y", "x"), quota("z", "r"), quota("s")])
    i = tree.index
    assert tree.chains[i["y"]] == (i["y"], i["x"], i["r"])
    assert tree.lca(i["y"], i["z"]) == i["r"]
    assert tree.lca(i["y"], i["s"]) == -1
    assert Resources({"cpu": 1}).fits_ceiling(tree.maxes[i["x"]])

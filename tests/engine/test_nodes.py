"""Gang placement: all or nothing, best fit decreasing, selectors, taints."""

from __future__ import annotations

from queueing.engine.nodes import NodeIndex, podset_reqs
from queueing.engine.types import Taint, Toleration

from .builders import node, podset


def names(index: NodeIndex, placement: object) -> list[tuple[str, str, int]]:
    assert placement is not None
    return [(ps, index.names[i], k) for ps, i, k in placement.placements]  # type: ignore[attr-defined]


def test_gang_is_all_or_nothing() -> None:
    idx = NodeIndex([node(f"n{i}", {"cpu": 4000}) for i in range(3)])
    assert idx.place(podset_reqs([podset(4, {"cpu": 3000})])) is None
    got = idx.place(podset_reqs([podset(3, {"cpu": 3000})]))
    assert names(idx, got) == [("main", "n0", 1), ("main", "n1", 1), ("main", "n2", 1)]
    # Nothing was taken by the attempt.
    assert all(f == {"cpu": 4000} for f in idx.free)


def test_best_fit_picks_the_tightest_node_and_packs_it() -> None:
    idx = NodeIndex(
        [node("big", {"cpu": 8000}), node("small", {"cpu": 4000}), node("mid", {"cpu": 6000})]
    )
    got = idx.place(podset_reqs([podset(1, {"cpu": 3000})]))
    assert names(idx, got) == [("main", "small", 1)]
    got = idx.place(podset_reqs([podset(3, {"cpu": 2000})]))
    # small takes 2, then mid (tighter than big) takes the third.
    assert names(idx, got) == [("main", "small", 2), ("main", "mid", 1)]


def test_every_resource_must_fit() -> None:
    idx = NodeIndex(
        [node("a", {"cpu": 4000, "memory": 1}), node("b", {"cpu": 8000, "memory": 100})]
    )
    got = idx.place(podset_reqs([podset(1, {"cpu": 1000, "memory": 50})]))
    assert names(idx, got) == [("main", "b", 1)]
    # A GPU pod does not fit nodes without GPUs (absent = zero).
    assert idx.place(podset_reqs([podset(1, {"cpu": 1, "nvidia.com/gpu": 1})])) is None


def test_commit_reduces_free_and_keeps_the_index_sorted() -> None:
    idx = NodeIndex([node("a", {"cpu": 4000}), node("b", {"cpu": 6000})])
    first = idx.place(podset_reqs([podset(1, {"cpu": 3000})]))
    assert first is not None
    idx.commit(first.per_node)
    assert idx.free[idx.index["a"]] == {"cpu": 1000}
    # Now b is the only node with 3 cpu free.
    assert names(idx, idx.place(podset_reqs([podset(1, {"cpu": 3000})]))) == [("main", "b", 1)]
    assert idx.place(podset_reqs([podset(3, {"cpu": 3000})])) is None


def test_reserved_and_held_capacity_are_not_free() -> None:
    idx = NodeIndex([node("a", {"cpu": 4000}, reserved={"cpu": 1000})])
    idx.hold("a", {"cpu": 2000})
    assert idx.place(podset_reqs([podset(1, {"cpu": 1500})])) is None
    assert idx.place(podset_reqs([podset(1, {"cpu": 1000})])) is not None
    assert idx.capacity == {"cpu": 3000}


def test_selectors_and_pools() -> None:
    idx = NodeIndex(
        [
            node("cpu-1", {"cpu": 8000}, labels={"pool": "cpu"}),
            node("gpu-1", {"cpu": 8000, "nvidia.com/gpu": 8}, labels={"pool": "gpu"}),
        ],
        pool_label="pool",
    )
    got = idx.place(podset_reqs([podset(1, {"cpu": 1000}, selector={"pool": "gpu"})]))
    assert names(idx, got) == [("main", "gpu-1", 1)]
    assert got is not None
    assert idx.pool_of(got.per_node) == "gpu"
    assert idx.place(podset_reqs([podset(1, {"cpu": 1000}, selector={"pool": "tpu"})])) is None


def test_taints_and_tolerations() -> None:
    gpu_taint = Taint("nvidia.com/gpu", "present", "NoSchedule")
    idx = NodeIndex(
        [
            node("tainted", {"cpu": 8000}, taints=[gpu_taint]),
            node("soft", {"cpu": 2000}, taints=[Taint("x", "", "PreferNoSchedule")]),
        ]
    )
    # No toleration: only the PreferNoSchedule node.
    assert names(idx, idx.place(podset_reqs([podset(1, {"cpu": 1000})]))) == [("main", "soft", 1)]
    assert idx.place(podset_reqs([podset(1, {"cpu": 4000})])) is None
    tol_equal = Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule")
    tol_wrong = Toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule")
    tol_exists = Toleration("nvidia.com/gpu", "Exists")
    tol_all = Toleration("", "Exists")
    for tol, ok in ((tol_equal, True), (tol_wrong, False), (tol_exists, True), (tol_all, True)):
        got = idx.place(podset_reqs([podset(1, {"cpu": 4000}, tolerations=[tol])]))
        assert (got is not None) == ok, tol


def test_toleration_semantics() -> None:
    t = Taint("k", "v", "NoExecute")
    assert Toleration("k", "Equal", "v", "").tolerates(t)
    assert not Toleration("k", "Equal", "v", "NoSchedule").tolerates(t)
    assert Toleration("k", "Exists", "", "NoExecute").tolerates(t)
    assert not Toleration("other", "Exists").tolerates(t)
    assert Toleration("", "Exists").tolerates(t)


def test_unschedulable_nodes_are_skipped_and_not_capacity() -> None:
    idx = NodeIndex(
        [node("cordoned", {"cpu": 8000}, unschedulable=True), node("ok", {"cpu": 1000})]
    )
    assert idx.capacity == {"cpu": 1000}
    assert idx.place(podset_reqs([podset(1, {"cpu": 2000})])) is None


def test_multiple_pod_sets_place_largest_first() -> None:
    # Workers first would put one worker on "a" (tightest) and leave no node for the
    # 5-cpu launcher; largest first places the launcher on "a" and both workers on "b".
    idx = NodeIndex([node("a", {"cpu": 5000}), node("b", {"cpu": 7000})])
    sets = [
        podset(2, {"cpu": 3000}, name="worker"),
        podset(1, {"cpu": 5000}, name="launcher"),
    ]
    got = idx.place(podset_reqs(sets))
    assert names(idx, got) == [("launcher", "a", 1), ("worker", "b", 2)]


def test_extra_capacity_counts_as_free() -> None:
    idx = NodeIndex([node("a", {"cpu": 4000})])
    idx.hold("a", {"cpu": 4000})
    assert idx.place(podset_reqs([podset(1, {"cpu": 2000})])) is None
    got = idx.place(podset_reqs([podset(1, {"cpu": 2000})]), extra={0: {"cpu": 3000}})
    assert names(idx, got) == [("main", "a", 1)]


def test_never_fits_explains_impossible_gangs() -> None:
    idx = NodeIndex([node("a", {"cpu": 4000}), node("b", {"cpu": 4000})])
    assert idx.never_fits(podset_reqs([podset(1, {"cpu": 5000})])) == (
        "no eligible node is large enough for one pod of 'main'"
    )
    assert idx.never_fits(podset_reqs([podset(3, {"cpu": 3000})])) == (
        "even empty, the eligible nodes hold only 2 of the 3 pods of 'main'"
    )
    assert idx.never_fits(podset_reqs([podset(2, {"cpu": 3000})])) is None
    assert idx.never_fits(podset_reqs([podset(1, {"cpu": 1}, selector={"x": "y"})])) == (
        "no schedulable node matches pod set 'main'"
    )


def test_placement_is_deterministic_regardless_of_input_order() -> None:
    nodes = [node(f"n{i}", {"cpu": 4000}) for i in range(5)]
    a = NodeIndex(nodes).place(podset_reqs([podset(3, {"cpu": 3000})]))
    b = NodeIndex(list(reversed(nodes))).place(podset_reqs([podset(3, {"cpu": 3000})]))
    assert a == b

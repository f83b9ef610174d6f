"""The quota invariants, checked on any cycle's snapshot and result.

The engine's tests prove them on small worlds; this module lets every cycle that runs
-- the simulator's, the benchmarks', and the cluster-facing one (``queueing/admission``
can call :func:`check_cycle` after ``run_cycle`` and log what it returns) -- check
them on what it actually decided, including head-only snapshots
(``Snapshot.unlisted_demand``) and incremental cycles:

1. A runtime quota never exceeds the quota's ``max``; a root's never exceeds the
   schedulable cluster; children together never get more than their parent has.
2. A quota whose demand reaches its ``min`` gets a runtime quota of at least its
   ``min`` whenever its parent has room for every child's guarantee (a quota that
   does not lend keeps its whole ``min`` whatever its demand).
3. An admission never takes a quota past its ``max``.
"""

from __future__ import annotations

from queueing.engine.quota import QuotaTree
from queueing.engine.types import (
    ACTIVE_PHASES,
    HOLDING_PHASES,
    CycleResult,
    Snapshot,
    WorkloadSpec,
)

__all__ = ["check_cycle"]


def _schedulable(snap: Snapshot) -> dict[str, int]:
    cap: dict[str, int] = {}
    for n in snap.nodes:
        if n.unschedulable:
            continue
        reserved = n.reserved._d
        for k, v in n.allocatable._d.items():
            cap[k] = cap.get(k, 0) + v - reserved.get(k, 0)
    return cap


def check_cycle(snap: Snapshot, result: CycleResult) -> list[str]:
    """Every invariant the cycle broke, as sentences; empty when all hold."""
    tree = QuotaTree(snap.quotas)
    names = tree.names
    rt = [dict(result.runtime_quota.get(n, {})) for n in names]
    demand = [dict(result.demand.get(n, {})) for n in names]
    used = [dict(result.used.get(n, {})) for n in names]
    problems: list[str] = []
    cluster = _schedulable(snap)
    # Own demand of each quota (workloads attached to it directly): a parent serves
    # those before its children.
    own: list[dict[str, int]] = [{} for _ in names]
    index_get = tree.index.get
    counted = HOLDING_PHASES | ACTIVE_PHASES
    # The workloads the cycle admitted, met on the way (for invariant 3).
    admitted_ids = {a.workload_id for a in result.admissions}
    by_id: dict[int, WorkloadSpec] = {}
    for w in snap.workloads:
        if admitted_ids and w.id in admitted_ids:
            by_id[w.id] = w
        i = index_get(w.quota)
        if i is None or w.phase not in counted:
            continue
        d = own[i]
        for k, v in w._request._d.items():  # its request's amounts (``w.request``)
            d[k] = d.get(k, 0) + v
    for name, extra in snap.unlisted_demand.items():
        i = tree.index.get(name)
        if i is not None:
            for k, v in extra.items():
                own[i][k] = own[i].get(k, 0) + int(v)

    for i, name in enumerate(names):
        for k, v in rt[i].items():
            mx = tree.maxes[i].get(k)
            if mx is not None and v > mx:
                problems.append(f"runtime quota of {name} ({k} {v}) exceeds its max {mx}")
        if tree.parent[i] < 0:
            for k, v in rt[i].items():
                if v > cluster.get(k, 0):
                    problems.append(
                        f"runtime quota of root {name} ({k} {v}) exceeds the cluster "
                        f"{cluster.get(k, 0)}"
                    )
        kids = tree.children[i]
        if not kids:
            continue
        for k in {r for c in kids for r in rt[c]}:
            total = sum(rt[c].get(k, 0) for c in kids)
            avail = rt[i].get(k, 0) - own[i].get(k, 0)
            if total > max(0, avail):
                problems.append(
                    f"children of {name} get {total} {k}, more than the {max(0, avail)} it has"
                )
            bases = {c: _base(tree, c, k, demand[c].get(k, 0)) for c in kids}
            if sum(bases.values()) > avail:
                continue  # the parent has no room for every guarantee: scaled down
            for c, base in bases.items():
                if rt[c].get(k, 0) < base:
                    problems.append(
                        f"{names[c]} demands {demand[c].get(k, 0)} {k} against a min of "
                        f"{tree.mins[c].get(k, 0)} but gets a runtime quota of "
                        f"{rt[c].get(k, 0)} while {name} has room"
                    )
    # Per chain node, the resources admissions of this cycle added to it.
    admitted_in: dict[int, set[str]] = {}
    for a in result.admissions:
        got = by_id.get(a.workload_id)
        if got is not None and got.quota in tree.index:
            ks = [k for k, v in got._request._d.items() if v]
            for c in tree.chains[tree.index[got.quota]]:
                admitted_in.setdefault(c, set()).update(ks)
    for i, resources in admitted_in.items():
        for k in resources:
            mx = tree.maxes[i].get(k)
            if mx is not None and used[i].get(k, 0) > mx:
                problems.append(
                    f"an admission took {names[i]} to {used[i].get(k, 0)} {k}, past its max {mx}"
                )
    return problems


def _base(tree: QuotaTree, c: int, k: str, d: int) -> int:
    m = tree.mins[c].get(k, 0)
    mx = tree.maxes[c].get(k)
    if mx is not None and m > mx:
        m = mx
    if not tree.allow_lent[c]:
        return m
    return min(d, m)

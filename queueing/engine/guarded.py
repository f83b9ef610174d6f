"""Borrowed work that a guaranteed claim may not reclaim (issue 11), for explanations.

A quota under its ``min`` whose head is short at an ancestor (its parent's runtime
quota, the cluster's max) reclaims from other quotas' borrowed work -- but never takes
a quota below its own ``min`` (:mod:`.preemption`). When every workload that borrows
what it lacks would do so (the demo: 16-GPU gangs of a quota 8 GPUs above its min), the
head waits for that work to end, and its explanation said only "cluster max is short by
1 nvidia.com/gpu". :func:`guarded_victims` finds that work, so the explanation can name
it and say why it is not preempted (``no_preempt="min"``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from queueing.engine.types import PREEMPTED, WorkloadSpec
from queueing.engine.victim_lists import keeps_min, vkey

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["MAX_LOOKED_AT", "guarded_victims"]

#: Holdings of the short quota's subtree looked at per (quota, short node, priority).
MAX_LOOKED_AT = 64


def guarded_victims(
    cy: Cycle,
    qi: int,
    c: int,
    short: Mapping[str, int],
    keys: Collection[str],
    priority: int,
    lower_only: bool,
    skip: set[int],
    most: int,
) -> tuple[list[WorkloadSpec], dict[str, int]] | None:
    """Other quotas' work under chain node ``c`` that borrows what quota ``qi`` lacks
    (``short``) and that reclaim may not take: each would leave a quota on its path
    (below the common ancestor) under its ``min`` in a resource of the claim
    (``keys``), as :func:`.preemption.find_victims` judges it. In victim order, as many as free the
    shortfall (at most ``most``), with what they free of the short resources.

    None when any such borrowed workload *could* be taken (then why the search did
    not take it is not this function's to say), when nothing borrows, when they would
    not free the shortfall, or when the first ``MAX_LOOKED_AT`` holdings do not decide.
    """
    tree = cy.tree
    chains = tree.chains
    chain = set(chains[qi])
    used = cy.used
    runtime = cy.runtime_base
    mins = tree.mins
    maxes = tree.maxes
    order: list[tuple[tuple[int, float, int], WorkloadSpec, int]] = []
    for vq in tree.subtree(c):
        if vq in chain:
            continue
        for v in cy.holding[vq]:
            if v.phase == PREEMPTED or not v.preemptible or v.id in skip:
                continue
            if lower_only and v.priority >= priority:
                continue
            d = v._request._d
            if any(d.get(k, 0) for k in short):
                order.append((vkey(v), v, vq))
                if len(order) > MAX_LOOKED_AT:
                    return None

    def keeps(v: WorkloadSpec, vq: int, x: int, k: str) -> bool:
        # As the search judges it: its own quota's min within its max if it holds more
        # than that (victim_lists.keeps_min).
        u = used[x].get(k, 0)
        left = u - v._request._d[k]
        if x != vq or tree.children[vq]:
            return left >= mins[x].get(k, 0)
        limits = (mins[x].get(k, 0), maxes[x].get(k))
        return keeps_min(cy.holding[vq], v, k, limits, left, u, skip)

    order.sort(key=lambda e: e[0])
    chosen: list[WorkloadSpec] = []
    freed: dict[str, int] = {}
    for _, v, vq in order:
        d = v._request._d
        path = [x for x in chains[vq] if x not in chain]
        if not any(used[x].get(k, 0) > runtime[x].get(k, 0) for x in path for k in short):
            continue  # not borrowing
        if all(keeps(v, vq, x, k) for x in path for k in keys if d.get(k, 0)):
            return None  # reclaim may take it: not this case
        if len(chosen) < most and any(freed.get(k, 0) < x for k, x in short.items()):
            chosen.append(v)
            for k in short:
                if d.get(k, 0):
                    freed[k] = freed.get(k, 0) + d[k]
    if not chosen or any(freed.get(k, 0) < x for k, x in short.items()):
        return None
    return chosen, freed

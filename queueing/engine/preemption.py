"""Preemption: choose a minimal set of victims that lets a candidate fit.

Candidate victims, in the order they are tried:

1. **Reclaim / FairShare** -- workloads of *other* quotas that sit in a subtree using
   more than its runtime quota (borrowing), below the lowest common ancestor with the
   preemptor. A victim is only taken while its subtree is still above runtime quota
   in a resource the preemptor needs, and never if that would take any quota on its
   path below its ``min`` in such a resource. When the preemptor's quota stays within
   its own ``min`` after admission the reason is ``Reclaim`` (it takes back what it
   is guaranteed). Otherwise it is borrowing too, and the reason is ``FairShare``:
   allowed only when the preemptor's share after the swap is at or below the victim
   quota's share after losing the victim (Kueue's LessThanOrEqualToFinalShare), so
   the victim's quota could never take it back -- no ping-pong.
2. **InQueue** -- lower-priority workloads of the same quota.

Within each group: lower priority first, then the most recently admitted (least work
lost), then the higher id. The set is built greedily until the preemptor fits its
quota chain and all its pods place on nodes (counting what victims hold as free),
then each victim is dropped again if the preemptor still fits without it (minimal).

Workloads already ``Preempted`` (eviction in flight) are never chosen again; the
preemptor is not admitted in this cycle -- the capacity is reserved for it until the
victims are gone (see :mod:`.cycle`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from queueing.engine.types import PREEMPTED, QueueSpec, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cycle import Cycle

__all__ = ["find_victims"]

INQUEUE = "InQueue"
RECLAIM = "Reclaim"
FAIRSHARE = "FairShare"

Found = tuple[
    list[WorkloadSpec],
    list[tuple[str, str]],
    dict[int, dict[str, int]],
    dict[int, dict[str, int]],
    dict[int, dict[str, int]],
]


def _over_runtime(cy: Cycle) -> dict[int, set[str]]:
    """Quota nodes using more than their runtime quota, with the resources concerned."""
    got: dict[int, set[str]] | None = getattr(cy, "_over_runtime", None)
    if got is None:
        got = {}
        for c, u in enumerate(cy.used):
            rt = cy.runtime[c]
            over = {k for k, v in u.items() if v > rt.get(k, 0)}
            if over:
                got[c] = over
        cy._over_runtime = got  # type: ignore[attr-defined]
    return got


def _share(
    used: Mapping[str, int],
    runtime: Mapping[str, int],
    freed: Mapping[str, int] | None,
    add: Mapping[str, int] | None = None,
) -> float:
    """``max_r (used - freed + add) / runtime`` over resources with a positive amount."""
    keys = set(used)
    if add:
        keys.update(add)
    best = 0.0
    for k in keys:
        amount = used.get(k, 0) - (freed.get(k, 0) if freed else 0) + (add.get(k, 0) if add else 0)
        if amount <= 0:
            continue
        cap = runtime.get(k, 0)
        if cap <= 0:
            return math.inf
        s = amount / cap
        if s > best:
            best = s
    return best


def find_victims(cy: Cycle, w: WorkloadSpec, qi: int, spec: QueueSpec) -> Found | None:
    """Victims that let ``w`` (in quota ``qi``, queue ``spec``) fit, or None.

    Returns ``(victims, [(reason, message)], per_node placement, freed per quota chain
    node, freed per node index)``.
    """
    tree = cy.tree
    req = w._request._d
    if not req:
        return None
    chains = tree.chains
    chain = chains[qi]
    chain_set = set(chain)
    maxes = tree.maxes
    for c in chain:
        mx = maxes[c]
        for k, amount in req.items():
            if k in mx and amount > mx[k]:
                return None  # never fits its own quota: nothing to win
    reqs = cy.reqs(w)
    nodes = cy.nodes
    used = cy.used
    runtime = cy.runtime
    mins = tree.mins
    skip = cy.victim_ids

    # -- candidates ------------------------------------------------------------------
    cands: list[tuple[tuple[int, int, float, int], WorkloadSpec, int]] = []
    if spec.reclaim != "Never":
        lower_only = spec.reclaim == "LowerPriority"
        seen_quota: set[int] = set()
        for x, over in _over_runtime(cy).items():
            if x in chain_set or not (over & req.keys()):
                continue
            for vq in tree.subtree(x):
                if vq == qi or vq in seen_quota:
                    continue
                seen_quota.add(vq)
                for v in cy.holding[vq]:
                    if v.phase == PREEMPTED or v.id in skip:
                        continue
                    if lower_only and v.priority >= w.priority:
                        continue
                    if not (v._request._d.keys() & req.keys()):
                        continue
                    key = (0, v.priority, -(v.admitted_at or 0.0), -v.id)
                    cands.append((key, v, vq))
    if spec.preempt_within_quota != "Never":
        for v in cy.holding[qi]:
            if v.phase == PREEMPTED or v.id in skip or v.priority >= w.priority:
                continue
            if not (v._request._d.keys() & req.keys()):
                continue
            cands.append(((1, v.priority, -(v.admitted_at or 0.0), -v.id), v, qi))
    if not cands:
        return None
    cands.sort(key=lambda t: t[0])

    elig_nodes: set[int] = set()
    for ps in reqs:
        elig_nodes.update(nodes.eligible(ps.elig))
    nindex = nodes.index

    freed: dict[int, dict[str, int]] = {}
    extra: dict[int, dict[str, int]] = {}
    chosen: list[tuple[WorkloadSpec, int]] = []

    def add(v: WorkloadSpec, vq: int, sign: int) -> None:
        vr = v._request._d
        for c in chains[vq]:
            f = freed.setdefault(c, {})
            for k, x in vr.items():
                f[k] = f.get(k, 0) + sign * x
        for node_name, amount in v.assignment.items():
            i = nindex.get(node_name)
            if i is None:
                continue
            e = extra.setdefault(i, {})
            for k, x in amount.raw.items():
                e[k] = e.get(k, 0) + sign * x

    def within_min() -> bool:
        fr = freed.get(qi, {})
        u = used[qi]
        m = mins[qi]
        return all(u.get(k, 0) - fr.get(k, 0) + v <= m.get(k, 0) for k, v in req.items())

    def fair_ok(vq: int) -> bool:
        mine = _share(used[qi], runtime[qi], freed.get(qi), req)
        theirs = _share(used[vq], runtime[vq], freed.get(vq))
        return mine <= theirs

    def reclaim_ok(v: WorkloadSpec, vq: int) -> bool:
        """Is ``v``'s subtree still borrowing, and does taking it respect every min?"""
        lca = tree.lca(vq, qi)
        vr = v._request._d
        borrowing = False
        for x in chains[vq]:
            if x == lca:
                break
            fr = freed.get(x, {})
            u = used[x]
            rt = runtime[x]
            m = mins[x]
            for k in req:
                a = u.get(k, 0) - fr.get(k, 0)
                if a > rt.get(k, 0):
                    borrowing = True
                t = vr.get(k, 0)
                if t and a - t < m.get(k, 0):
                    return False
        return borrowing

    def fits() -> tuple[bool, dict[int, dict[str, int]] | None]:
        if cy.quota_fail(qi, req, freed) >= 0:
            return False, None
        pl = nodes.place(reqs, extra)
        if pl is None:
            return False, None
        return True, pl.per_node

    def useful(v: WorkloadSpec, vq: int) -> bool:
        c = cy.quota_fail(qi, req, freed)
        vr = v._request._d
        if c >= 0:
            if c not in chains[vq]:
                return False
            lc = cy.load[c]
            lim = cy.limit[c]
            fr = freed.get(c, {})
            return any(
                vr.get(k, 0) and lc.get(k, 0) - fr.get(k, 0) + x > lim.get(k, 0)
                for k, x in req.items()
            )
        for node_name, amount in v.assignment.items():
            i = nindex.get(node_name)
            if i is not None and i in elig_nodes and amount.raw.keys() & req.keys():
                return True
        return False

    # -- greedy ----------------------------------------------------------------------
    found: dict[int, dict[str, int]] | None = None
    for _, v, vq in cands:
        if not useful(v, vq):
            continue
        if vq != qi and not reclaim_ok(v, vq):
            continue
        add(v, vq, 1)
        if vq != qi and not within_min() and not fair_ok(vq):
            add(v, vq, -1)
            continue
        chosen.append((v, vq))
        ok, found = fits()
        if ok:
            break
    if found is None:
        return None
    placed: dict[int, dict[str, int]] = found

    # -- add back: drop every victim the preemptor can do without ----------------------
    for v, vq in list(reversed(chosen)):
        add(v, vq, -1)
        ok, pl = fits()
        if (
            ok
            and pl is not None
            and all(vq2 == qi or within_min() or fair_ok(vq2) for v2, vq2 in chosen if v2 is not v)
        ):
            chosen.remove((v, vq))
            placed = pl
        else:
            add(v, vq, 1)

    # -- reasons -----------------------------------------------------------------------
    reasons: list[tuple[str, str]] = []
    guaranteed = within_min()
    for v, vq in chosen:
        if vq == qi:
            reasons.append(
                (
                    INQUEUE,
                    f"preempted by workload {w.id} (priority {w.priority} > {v.priority}) "
                    f"in quota {w.quota}",
                )
            )
        elif guaranteed:
            reasons.append(
                (
                    RECLAIM,
                    f"quota {w.quota} reclaims its guaranteed share from quota {v.quota}, "
                    f"which uses more than its runtime quota (for workload {w.id})",
                )
            )
        else:
            if not fair_ok(vq):
                return None
            mine = _share(used[qi], runtime[qi], freed.get(qi), req)
            theirs = _share(used[vq], runtime[vq], freed.get(vq))
            reasons.append(
                (
                    FAIRSHARE,
                    f"fair share: quota {w.quota} with workload {w.id} would be at "
                    f"{mine:.2f} of its runtime quota, quota {v.quota} at {theirs:.2f} "
                    f"without this workload",
                )
            )
    return [v for v, _ in chosen], reasons, placed, freed, extra

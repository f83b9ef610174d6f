"""The elastic-quota tree and its runtime quota (Koordinator's rule).

Runtime quota is what a quota may use *now*. It is computed top-down, each resource
on its own:

1. A root gets ``min(its max, schedulable cluster capacity)``.
2. Inside a parent, workloads attached directly to the parent are served first; what
   is left (``available``) is split among the children.
3. Each child first gets ``min(min, demand)`` -- or its whole ``min`` when it does not
   allow lending. If those bases already exceed ``available`` (mins over-committed,
   or the cluster shrank) the bases are scaled down in proportion to themselves.
4. The remainder is water-filled among children with unmet demand in proportion to
   ``shared_weight``, each capped at ``min(max, demand)``; a child that saturates
   returns its surplus to the pool and the rest iterate. Weight 0 borrows nothing.
5. Every integer split uses the largest-remainder (Hamilton) method, ties broken by
   quota name, so the parts always add up to the whole: nothing is lost or
   double-counted to rounding.

Demand is admitted usage plus the requests of competing workloads, summed up the
tree and capped by each quota's ``max``. Capacity left over once all demand is met
stays unassigned (as in Koordinator): runtime quota follows demand.

Reference: koordinator-sh/koordinator
``pkg/scheduler/plugins/elasticquota/core/runtime_quota_calculator.go`` and
``docs/proposals/scheduling/20220722-multi-hierarchy-elastic-quota-management.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from queueing.engine.types import QuotaNode, WorkloadSpec

__all__ = ["QuotaTree", "hamilton", "waterfill"]


def hamilton(total: int, weights: Sequence[int], names: Sequence[str]) -> list[int]:
    """Split ``total`` into integers proportional to ``weights`` (largest remainder).

    The parts sum to exactly ``total`` whenever some weight is positive; non-positive
    weights get 0. Ties between equal remainders go to the lexicographically smaller
    name, so the split is deterministic.
    """
    n = len(weights)
    parts = [0] * n
    if total <= 0:
        return parts
    tw = 0
    for w in weights:
        if w > 0:
            tw += w
    if tw <= 0:
        return parts
    given = 0
    rems: list[tuple[int, str, int]] = []
    for i, w in enumerate(weights):
        if w <= 0:
            continue
        q, r = divmod(w * total, tw)  # exact: Python ints do not overflow
        parts[i] = q
        given += q
        rems.append((-r, names[i], i))
    residual = total - given
    if residual > 0:
        rems.sort()
        for k in range(residual):
            parts[rems[k][2]] += 1
    return parts


class Claims(list[dict[str, int]]):
    """What aged heads claim, per quota (:func:`.aging.aged_claims`), and ``since``:
    per quota, when its claiming head joined its queue (``inf``: no claim). The
    runtime split serves colliding claims in that order, the oldest first. ``heads``:
    per quota, its claiming head (None: no claim)."""

    def __init__(
        self,
        claims: Sequence[dict[str, int]],
        since: Sequence[float],
        heads: Sequence[WorkloadSpec | None] | None = None,
    ) -> None:
        super().__init__(claims)
        self.since = list(since)
        self.heads: list[WorkloadSpec | None] = (
            list(heads) if heads is not None else [None] * len(claims)
        )


def waterfill(
    available: int,
    bases: Sequence[int],
    caps: Sequence[int],
    weights: Sequence[int],
    names: Sequence[str],
    extras: Sequence[int] | None = None,
    order: Sequence[float] | None = None,
    within: Sequence[int] | None = None,
) -> list[int]:
    """Allocate ``available`` among entries: bases, then aged claims, then by weight.

    Returns per-entry allocations. Each entry gets its ``base``; if the bases exceed
    ``available`` they are scaled down in proportion to themselves. Then each entry
    gets its ``extras`` (aged claims beyond the base, see :mod:`.aging`). When the rest
    does not cover them all and ``order`` says how old each claim is, they are served
    whole, the oldest first, and the first that no longer fits takes what is left
    (it holds that room until enough ends for it; younger claims wait behind it);
    without ``order``, in proportion to them. In proportion, two aged gangs whose
    claims together passed the room each got less than it needed and neither ever
    started, the room idle (a 64-cpu gang and a 16-cpu job on 64 idle cpu, both short).
    The remainder is shared by weight among entries whose allocation is below ``cap``,
    iteratively (water-filling), never above ``cap``.

    When the bases pass ``available`` (the mins oversubscribed: nodes lost, say) and
    ``within`` says what aged claims ask within their entry's base, those are served
    first, whole and the oldest first, and the rest of the bases share what is left in
    proportion. Cut in proportion with the rest, every quota could get less than its
    smallest workload and the cluster stayed idle (the liveness property test: three
    mins of 6, 4 and 6 cpu on a 5-cpu node, each cut to 1-2 cpu, every head 2-4 cpu).
    """
    n = len(bases)
    if available <= 0:
        return [0] * n
    total_base = sum(bases)
    if total_base >= available:
        if total_base == available:
            return list(bases)
        if within is None or order is None or not any(within):
            return hamilton(available, bases, names)
        wants = [min(w, b) for w, b in zip(within, bases, strict=True)]
        given = _oldest_whole(available, wants, order, names)
        left = available - sum(given)
        rest = hamilton(left, [b - g for b, g in zip(bases, given, strict=True)], names)
        return [g + r for g, r in zip(given, rest, strict=True)]
    alloc = list(bases)
    remaining = available - total_base
    if extras is not None:
        ex = [max(0, min(e, caps[i] - alloc[i])) for i, e in enumerate(extras)]
        total_ex = sum(ex)
        if total_ex > 0:
            if total_ex <= remaining:
                give = ex
            elif order is None:
                give = hamilton(remaining, ex, names)
            else:
                give = _oldest_whole(remaining, ex, order, names)
            for i, g in enumerate(give):
                alloc[i] += g
            remaining -= sum(give)
    need = [i for i in range(n) if caps[i] > alloc[i]]
    while remaining > 0 and need:
        ws = [weights[i] for i in need]
        if sum(w for w in ws if w > 0) <= 0:
            break
        deltas = hamilton(remaining, ws, [names[i] for i in need])
        remaining = 0
        still: list[int] = []
        for i, d in zip(need, deltas, strict=True):
            a = alloc[i] + d
            if a >= caps[i]:
                remaining += a - caps[i]
                a = caps[i]
            else:
                still.append(i)
            alloc[i] = a
        if len(still) == len(need) and remaining == 0:
            break
        need = still
    return alloc


def _oldest_whole(
    total: int, wants: Sequence[int], order: Sequence[float], names: Sequence[str]
) -> list[int]:
    """Split ``total`` among claims that together pass it: whole, the oldest first.

    The first that no longer fits takes what is left (it holds that room until enough
    ends for it; younger claims wait behind it). A claim that cannot be met here
    whatever the others get -- it asks more than ``total``, or its ``order`` is
    infinite (:meth:`QuotaTree._claim_order`: it cannot be met in another resource)
    -- takes nothing: what it held, nobody could use (the liveness property test: the
    oldest such claim held what was left while younger work that fitted waited).
    What it leaves goes by weight, with everyone else's demand.
    """
    n = len(wants)
    give = [0] * n
    left = total
    for i in sorted(range(n), key=lambda i: (order[i], names[i])):
        want = wants[i]
        if want <= 0 or want > total or order[i] == math.inf:
            continue
        g = want if want <= left else left
        give[i] = g
        left -= g
        if left <= 0:
            break
    return give


#: A demand no quota reaches: its base is its whole ``min`` (:meth:`QuotaTree._base`).
_ANY = 1 << 62


class QuotaTree:
    """An index over the quota forest of one snapshot.

    Quotas are numbered in topological order (every parent before its children), so
    top-down passes walk ``range(n)`` and bottom-up passes walk it backwards.
    """

    __slots__ = (
        "_no_demand",
        "_unlent",
        "allow_lent",
        "chains",
        "children",
        "fair_weight",
        "index",
        "maxes",
        "mins",
        "names",
        "nodes",
        "parent",
        "roots",
        "size",
    )

    def __init__(self, quotas: Sequence[QuotaNode]) -> None:
        by_name: dict[str, QuotaNode] = {}
        for q in quotas:
            if q.name in by_name:
                raise ValueError(f"quota {q.name!r} appears twice in the snapshot")
            by_name[q.name] = q
        for q in quotas:
            if q.parent is not None and q.parent not in by_name:
                raise ValueError(f"quota {q.name!r} names unknown parent {q.parent!r}")
        kids: dict[str | None, list[str]] = {}
        for q in quotas:
            kids.setdefault(q.parent, []).append(q.name)
        order: list[str] = []
        stack = sorted(kids.get(None, []), reverse=True)
        while stack:
            name = stack.pop()
            order.append(name)
            stack.extend(sorted(kids.get(name, []), reverse=True))
        if len(order) != len(by_name):
            stuck = sorted(set(by_name) - set(order))
            raise ValueError(f"quota tree has a cycle through {stuck}")
        self.names: list[str] = order
        self.index: dict[str, int] = {name: i for i, name in enumerate(order)}
        self.nodes: list[QuotaNode] = [by_name[name] for name in order]
        self.parent: list[int] = [
            -1 if n.parent is None else self.index[n.parent] for n in self.nodes
        ]
        self.children: list[list[int]] = [[] for _ in order]
        for i, p in enumerate(self.parent):
            if p >= 0:
                self.children[p].append(i)
        self.roots: list[int] = [i for i, p in enumerate(self.parent) if p < 0]
        chains: list[tuple[int, ...]] = []
        for i, p in enumerate(self.parent):
            chains.append((i,) if p < 0 else (i, *chains[p]))
        self.chains: list[tuple[int, ...]] = chains
        # Preorder numbering makes every subtree the contiguous range [i, i + size[i]).
        size = [1] * len(order)
        for i in range(len(order) - 1, -1, -1):
            p = self.parent[i]
            if p >= 0:
                size[p] += size[i]
        self.size: list[int] = size
        self.mins: list[dict[str, int]] = [dict(n.min.raw) for n in self.nodes]
        self.maxes: list[dict[str, int]] = [
            {k: int(v) for k, v in n.max.items()} for n in self.nodes
        ]
        self.allow_lent: list[bool] = [n.allow_lent for n in self.nodes]
        #: Per parent: per resource, what its children keep whatever their demand
        #: (:meth:`ceiling`).
        self._unlent: dict[int, dict[str, int]] = {}
        self._no_demand: list[dict[str, int]] = [{} for _ in order]
        self.fair_weight: list[float] = [n.fair_weight for n in self.nodes]

    def __len__(self) -> int:
        return len(self.names)

    def root_of(self, i: int) -> int:
        """Index of the root above quota ``i``."""
        return self.chains[i][-1]

    def subtree(self, i: int) -> range:
        """Indices of quota ``i`` and all its descendants."""
        return range(i, i + self.size[i])

    def lca(self, a: int, b: int) -> int:
        """Lowest common ancestor of quotas ``a`` and ``b``; -1 if in different trees."""
        seen = set(self.chains[a])
        for x in self.chains[b]:
            if x in seen:
                return x
        return -1

    def subtree_sums(self, own: Sequence[Mapping[str, int]]) -> list[dict[str, int]]:
        """Per quota, the sum of ``own`` over its subtree (itself and descendants)."""
        out = [dict(o) for o in own]
        parent = self.parent
        for i in range(len(out) - 1, -1, -1):
            p = parent[i]
            if p >= 0:
                dst = out[p]
                for k, v in out[i].items():
                    dst[k] = dst.get(k, 0) + v
        return out

    def demand(
        self,
        own: Sequence[Mapping[str, int]],
        held: Sequence[Mapping[str, int]] | None = None,
    ) -> list[dict[str, int]]:
        """Subtree demand per quota, each level capped by that quota's ``max``.

        A quota that does not lend (``allow_lent=False``) keeps its whole ``min``, so
        its parent sees at least that much of it (as Koordinator counts its request
        as ``max(request, min)``): otherwise the parent's runtime quota would not
        cover the reserved min and the siblings' guaranteed minimums would pay for it.
        With ``held`` (another demand per quota), each quota's demand is at least the
        base that one holds (:meth:`_base`): its min for that demand.
        """
        out = [dict(o) for o in own]
        parent = self.parent
        maxes = self.maxes
        mins = self.mins
        lent = self.allow_lent
        for i in range(len(out) - 1, -1, -1):
            d = out[i]
            if not lent[i]:
                for k, m in mins[i].items():
                    if d.get(k, 0) < m:
                        d[k] = m
            elif held is not None:
                for k in mins[i]:
                    b = self._base(i, k, held[i].get(k, 0))
                    if d.get(k, 0) < b:
                        d[k] = b
            mx = maxes[i]
            if mx:
                for k, cap in mx.items():
                    if d.get(k, 0) > cap:
                        d[k] = cap
            p = parent[i]
            if p >= 0:
                dst = out[p]
                for k, v in d.items():
                    dst[k] = dst.get(k, 0) + v
        return out

    def runtime(
        self,
        own_demand: Sequence[Mapping[str, int]],
        cluster: Mapping[str, int],
        claims: Sequence[Mapping[str, int]] | None = None,
        unusable: Mapping[int, Mapping[str, int]] | None = None,
    ) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
        """Runtime quota per quota; returns ``(runtime, demand)``.

        ``own_demand[i]`` is the usage plus competing requests of workloads attached
        directly to quota ``i``; ``cluster`` is the schedulable cluster capacity.
        ``claims[i]`` (optional) is what aged heads of quota ``i`` claim, its usage
        included (:mod:`.aging`); served after the mins, before the weights.
        ``unusable[i]`` (optional) is the part of quota ``i``'s own demand that asks
        more than it can get now (:class:`Rooms`): it still holds the quota's ``min``
        but takes no share of the weights, which go to demand that can use them.
        """
        n = len(self.names)
        demand = self.demand(own_demand)
        shared = demand
        if unusable:
            less = [dict(d) for d in own_demand]
            for i, u in unusable.items():
                dl = less[i]
                for k, v in u.items():
                    dl[k] = dl.get(k, 0) - v
            # Each quota still holds its min for its whole demand: so does its parent.
            shared = self.demand(less, held=demand)
        extra: list[dict[str, int]] | None = None
        claimed: list[dict[str, int]] | None = None
        first: list[dict[str, int]] | None = None
        since = self._claim_since(claims) if isinstance(claims, Claims) else None
        if claims is not None:
            extra, claimed, first = self._claim_extras(claims, demand, since)
        resources: set[str] = set(cluster)
        for i in range(n):
            resources.update(demand[i])
            resources.update(self.mins[i])
            resources.update(self.maxes[i])
        runtime: list[dict[str, int]] = [{} for _ in range(n)]
        for root in self.roots:
            mx = self.maxes[root]
            rt = runtime[root]
            for r in resources:
                c = cluster.get(r, 0)
                if r in mx and mx[r] < c:
                    c = mx[r]
                if c > 0:
                    rt[r] = c
        names = self.names
        mins = self.mins
        maxes = self.maxes
        lent = self.allow_lent
        for p in range(n):
            kids = self.children[p]
            if not kids:
                continue
            own_p = own_demand[p]
            rt_p = runtime[p]
            kid_names = [names[c] for c in kids]
            kid_since: list[float] | None = None
            alone: list[bool] | None = None
            if since is not None and extra is not None and claimed is not None:
                kid_since, alone = self._claim_order(
                    kids, since, extra, claimed, demand, rt_p, own_p, first
                )
            for r in resources:
                avail = rt_p.get(r, 0) - own_p.get(r, 0)
                if avail <= 0:
                    continue
                bases: list[int] = []
                caps: list[int] = []
                weights: list[int] = []
                extras: list[int] | None = None
                order: list[float] | None = None
                within: list[int] | None = None
                if extra is not None and claimed is not None:
                    if alone is not None and first is not None and any(alone):
                        extras = [
                            (first if a else extra)[c].get(r, 0)
                            for c, a in zip(kids, alone, strict=True)
                        ]
                    else:
                        extras = [extra[c].get(r, 0) for c in kids]
                    if since is not None:
                        within = [claimed[c].get(r, 0) for c in kids]
                        if any(extras) or any(within):
                            order = kid_since
                    if not any(extras):
                        extras = None
                any_need = False
                for c in kids:
                    d = demand[c].get(r, 0)
                    m = mins[c].get(r, 0)
                    mx_c = maxes[c].get(r)
                    if mx_c is not None and m > mx_c:
                        m = mx_c  # a min above max cannot be honoured
                    base = (d if d < m else m) if lent[c] else m
                    bases.append(base)
                    if shared is not demand:
                        # Beyond its base, only demand it can use takes a share.
                        s_c = shared[c].get(r, 0)
                        d = s_c if s_c > base else base
                    caps.append(d)
                    if d > base:
                        any_need = True
                    weights.append(self.nodes[c].weight(r) if d > base else 0)
                if not any_need and sum(bases) <= avail:
                    alloc = bases
                else:
                    alloc = waterfill(avail, bases, caps, weights, kid_names, extras, order, within)
                for c, a in zip(kids, alloc, strict=True):
                    if a > 0:
                        runtime[c][r] = a
        return runtime, demand

    def _claim_order(
        self,
        kids: Sequence[int],
        since: Sequence[float],
        extra: Sequence[Mapping[str, int]],
        claimed: Sequence[Mapping[str, int]],
        demand: Sequence[Mapping[str, int]],
        rt_p: Mapping[str, int],
        own_p: Mapping[str, int],
        first: Sequence[Mapping[str, int]] | None = None,
    ) -> tuple[list[float], list[bool]]:
        """The age order of ``kids``' claims in their parent's split: oldest first, but
        a claim that cannot be met here in some resource whatever the others get (the
        siblings' bases hold the rest) is ``inf`` -- it takes nothing in the claims'
        turn in any resource (:func:`_oldest_whole`). And per kid, whether it claims
        here only for the oldest claim of its subtree (``first``, see
        :meth:`_claim_extras`): all of its subtree's claims together cannot be met, but
        that one can.

        Resource by resource, the oldest claim took the memory it asked while a
        sibling's min held the cpu it also needed, and that sibling's claim was short
        of the memory: neither started, on an idle cluster (the liveness property
        test). And a parent whose children's claims together passed what it could get
        claimed nothing, though its oldest claim alone fitted: its room went by weight,
        each claim stayed short and the cluster idle (the liveness scan, seed 1647).
        """
        order = [since[c] for c in kids]
        alone = [False] * len(kids)
        res: set[str] = set()
        for c in kids:
            res.update(extra[c])
            res.update(claimed[c])
        for r in res:
            avail = rt_p.get(r, 0) - own_p.get(r, 0)
            bases = [self._base(c, r, demand[c].get(r, 0)) for c in kids]
            room = avail - sum(bases)
            for j, c in enumerate(kids):
                if order[j] == math.inf:
                    continue
                inside = min(claimed[c].get(r, 0), bases[j])
                if room < 0 and inside > avail:
                    order[j] = math.inf
                    continue
                ex = min(extra[c].get(r, 0), demand[c].get(r, 0) - bases[j])
                if ex <= max(room, 0):
                    continue
                if first is not None:
                    fx = min(first[c].get(r, 0), demand[c].get(r, 0) - bases[j])
                    if fx <= max(room, 0):
                        alone[j] = True
                        continue
                order[j] = math.inf
        return order, [a and o != math.inf for a, o in zip(alone, order, strict=True)]

    def ceiling(
        self, i: int, capacity: Mapping[str, int], memo: list[dict[str, int] | None]
    ) -> dict[str, int]:
        """The most quota ``i`` could ever get, per resource (memoised in ``memo``, one
        slot per quota): the cluster's ``capacity``, every ``max`` on its chain, and at
        each level what its siblings keep whatever their demand -- a quota with
        ``allow_lent`` off holds its whole ``min`` in the split (:meth:`_base`) though
        idle, and aging's claims never take a min. A workload asking more can never
        start (the cycle sets it aside): a head of 7 cpu whose two siblings kept 6 of
        their parent's 11 unlent waited for ever and blocked its strict-order queue
        (the liveness property test).
        """
        got = memo[i]
        if got is None:
            # What it can get now (:class:`Rooms`) were no quota to demand anything.
            got = Rooms(self, capacity, self._no_demand, caps=memo, kept=self._unlent).of(i)
        return got

    def _base(self, c: int, r: str, d: int) -> int:
        m = self.mins[c].get(r, 0)
        mx = self.maxes[c].get(r)
        if mx is not None and m > mx:
            m = mx
        if not self.allow_lent[c]:
            return m
        return d if d < m else m

    def _claim_since(self, claims: Claims) -> list[float]:
        """Per quota, when the oldest claiming head in its subtree joined its queue."""
        since = list(claims.since)
        parent = self.parent
        for i in range(len(since) - 1, -1, -1):
            p = parent[i]
            if p >= 0 and since[i] < since[p]:
                since[p] = since[i]
        return since

    def _claim_extras(
        self,
        claims: Sequence[Mapping[str, int]],
        demand: Sequence[Mapping[str, int]],
        since: Sequence[float] | None = None,
    ) -> tuple[list[dict[str, int]], list[dict[str, int]], list[dict[str, int]] | None]:
        """Per quota, how far its subtree's aged claims go beyond its base, within demand;
        what its subtree claims in all (within demand), where something claims; and
        with ``since`` (per quota, its subtree's oldest claim: :meth:`_claim_since`),
        how far beyond its base the oldest claim of its subtree alone goes.

        A subtree claims its own claim plus, per child, the larger of the child's base
        and the child's claim; what that exceeds the quota's own base by (capped by its
        demand) is served in its parent's split before the weights. What it claims
        within its base is served first when the bases pass the parent's room
        (:func:`waterfill`'s ``within``). Its oldest claim alone is that claim along
        its chain, each level's other children at their base: what the parent's split
        serves when the whole does not fit (:meth:`_claim_order`), as each level serves
        colliding claims whole, the oldest first.
        """
        n = len(self.names)
        extra: list[dict[str, int]] = [{} for _ in range(n)]
        claimed: list[dict[str, int]] = [{} for _ in range(n)]
        # Effective claim of each subtree, per resource (only where something claims);
        # and that of its oldest claim alone.
        eff: list[dict[str, int]] = [{} for _ in range(n)]
        first: list[dict[str, int]] | None = None
        first_eff: list[dict[str, int]] = [{} for _ in range(n)]
        own_since: Sequence[float] | None = None
        if since is not None and isinstance(claims, Claims):
            first = [{} for _ in range(n)]
            own_since = claims.since
        for i in range(n - 1, -1, -1):
            own = claims[i]
            kids = self.children[i]
            res = set(own)
            for c in kids:
                res.update(eff[c])
            if not res:
                continue
            d = demand[i]
            e = extra[i]
            out = eff[i]
            oldest = -1  # the child whose subtree holds the oldest claim (-1: its own)
            if first is not None and since is not None and own_since is not None:
                t = own_since[i] if own else math.inf
                for c in kids:
                    if eff[c] and since[c] < t:
                        t = since[c]
                        oldest = c
            for r in res:
                v = own.get(r, 0)
                fv = v if oldest < 0 else 0
                for c in kids:
                    dc = demand[c].get(r, 0)
                    # A child without a claim still needs its base within this subtree.
                    b = self._base(c, r, dc)
                    v += eff[c].get(r, b)
                    fv += first_eff[c].get(r, b) if c == oldest else b
                dr = d.get(r, 0)
                v = min(v, dr)
                base = self._base(i, r, dr)
                if v > base:
                    e[r] = v - base
                out[r] = max(v, base)
                if own.get(r, 0) or any(r in eff[c] for c in kids):
                    claimed[i][r] = v
                if first is not None:
                    fv = min(fv, dr)
                    if fv > base:
                        first[i][r] = fv - base
                    first_eff[i][r] = max(fv, base)
        return extra, claimed, first


class Rooms:
    """The most each quota can get *now*, per resource, memoised over one state: as
    :meth:`QuotaTree.ceiling`, but at each level its siblings keep their base for
    their present ``demand`` (a min is held for the demand it covers, and aging's
    claims never take it). A workload asking more cannot start while that demand
    lasts, whatever else ends: its quota's share of the weights would sit idle (the
    liveness scan, seed 1293: a GPU given to a quota whose head needed two while a
    sibling's 1-GPU jobs waited on an idle cluster).
    """

    __slots__ = ("_caps", "_kept", "capacity", "demand", "tree")

    def __init__(
        self,
        tree: QuotaTree,
        capacity: Mapping[str, int],
        demand: Sequence[Mapping[str, int]],
        *,
        caps: list[dict[str, int] | None] | None = None,
        kept: dict[int, dict[str, int]] | None = None,
    ) -> None:
        self.tree = tree
        self.capacity = capacity
        self.demand = demand
        #: Per quota, its room once worked out (``caps``: a memo the caller keeps).
        self._caps: list[dict[str, int] | None] = caps if caps is not None else [None] * len(tree)
        #: Per parent: per resource, what its children keep for their demand.
        self._kept: dict[int, dict[str, int]] = kept if kept is not None else {}

    def of(self, i: int) -> dict[str, int]:
        got = self._caps[i]
        if got is not None:
            return got
        tree = self.tree
        p = tree.parent[i]
        cap = dict(self.capacity) if p < 0 else dict(self.of(p))
        if p >= 0:
            kept = self._kept.get(p)
            if kept is None:
                kept = self._kept[p] = {}
                for c in tree.children[p]:
                    dc = self.demand[c]
                    for r in tree.mins[c]:
                        b = tree._base(c, r, dc.get(r, 0))
                        if b > 0:
                            kept[r] = kept.get(r, 0) + b
            di = self.demand[i]
            for r, total in kept.items():
                others = total - tree._base(i, r, di.get(r, 0))
                if others <= 0:
                    continue
                have = cap.get(r, 0)
                mine = tree._base(i, r, _ANY)
                if others + mine <= have:
                    room = have - others
                else:
                    # The bases pass the parent's room: scaled in proportion, as the
                    # split does (:func:`waterfill`).
                    kids = tree.children[p]
                    bases = [
                        tree._base(c, r, _ANY if c == i else self.demand[c].get(r, 0)) for c in kids
                    ]
                    room = hamilton(have, bases, [tree.names[c] for c in kids])[kids.index(i)]
                if room < have:
                    cap[r] = max(0, room)
        for r, m in tree.maxes[i].items():
            if m < cap.get(r, 0):
                cap[r] = m
        self._caps[i] = cap
        return cap

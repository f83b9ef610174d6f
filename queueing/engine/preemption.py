"""Preemption: choose a minimal set of victims that lets a candidate fit.

Candidate victims, in the order they are tried:

1. **Reclaim / FairShare** -- workloads of *other* quotas that sit in a subtree using
   more than its runtime quota (borrowing), below the lowest common ancestor with the
   preemptor. A preemptor whose quota fits but whose pods do not place, and whose
   quota chain (up to that ancestor) stays within its ``min`` with it, may also take
   from subtrees using more than their ``min`` (Kueue's reclaim within a cohort): the
   runtime quota counts every schedulable node, so when the nodes a workload can use
   are full of work within its owners' runtime quota, nothing is "borrowed" by that
   measure and a guaranteed minimum could wait for as long as that work runs. A victim is only taken while its subtree is still above runtime quota
   in a resource the preemptor needs, and never if that would take any quota on its
   path below its ``min`` in such a resource. When the preemptor's quota stays within
   its own ``min`` after admission the reason is ``Reclaim`` (it takes back what it
   is guaranteed). Otherwise it is borrowing too, and the reason is ``FairShare``:
   allowed only when the preemptor's share after the swap is at or below the victim
   quota's share after losing the victim (Kueue's LessThanOrEqualToFinalShare), so
   the victim's quota could never take it back -- no ping-pong.
2. **InQueue** -- lower-priority workloads of the same quota, but never one that ranks
   ahead of the preemptor in the order the cycle admits in: of a queue of higher queue
   priority, or by age (aged, and the preemptor fresh or queued later). Fair share
   spares them too (:func:`.aging.admitted_ahead`); a reclaim of a guaranteed min does
   not.

Within each group: lower priority first, then the most recently admitted (least work
lost), then the higher id. A workload expected to finish within ``preempt_grace_s``
(declared runtime, else its queue's p50) is not evicted: waiting for it costs less
than the work its eviction would throw away -- until it has overrun its expected end
by ``preempt_grace_s`` too, after which it is a candidate like any other. It is *awaited* instead: when the set
that lets the preemptor fit includes such a workload, nothing is evicted this cycle
and the preemptor reserves what it needs, so that lower-priority work cannot take
the capacity as it frees up (with cycles woken at every completion, small jobs would
otherwise refill each freed slot and starve a large head for ever). A victim is only taken if it reduces what is still
missing (a quota node's shortfall, or -- once quota fits -- capacity on a node the
preemptor may use). The set is built greedily until the preemptor fits its quota
chain and all its pods place on nodes (counting what victims hold as free); then
each victim is dropped again if the preemptor still fits without it (minimal).

Capacity that is already being released -- victims ``Preempted`` in earlier cycles,
and victims chosen earlier in this cycle -- is never counted twice: those workloads
are not candidates again, and the borrowing and ``min`` checks see usage net of them.
The preemptor is not admitted in this cycle; the capacity is reserved for it until
the victims are gone (see :mod:`.cycle`).

Cost is bounded: a search examines at most ``MAX_EXAMINED`` candidates and tries at
most ``MAX_PLACEMENTS`` gang placements.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from queueing.engine.aging import admitted_ahead, aged_before
from queueing.engine.nodes import EligKey
from queueing.engine.types import PREEMPTED, QueueSpec, WorkloadSpec
from queueing.engine.victim_lists import (
    FilteredVictims,
    OrderedVictims,
    VKey,
    first,
    held_beyond_max,
    keeps_min,
)

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = [
    "MAX_EXAMINED",
    "MAX_EXAMINED_NODES_ONLY",
    "MAX_PLACEMENTS",
    "Preemptor",
    "awaited_by",
    "find_victims",
    "search_key",
]

INQUEUE = "InQueue"
RECLAIM = "Reclaim"
FAIRSHARE = "FairShare"

MAX_EXAMINED = 256
#: When quota already fits and only nodes are short, victims help only if they sit on
#: the right nodes; such searches rarely succeed late, so they look at fewer.
MAX_EXAMINED_NODES_ONLY = 32
MAX_PLACEMENTS = 8

Found = tuple[
    list[WorkloadSpec],
    list[tuple[str, str]],
    dict[int, dict[str, int]],
    dict[int, dict[str, int]],
    dict[int, dict[str, int]],
]


class Preemptor:
    """Per-cycle indexes for victim search, built on first use.

    ``releasing`` -- per quota node, what victims (in flight or chosen this cycle)
    will release; ``by_quota`` -- each quota's own holdings sorted as victims;
    ``over`` -- quota nodes above their runtime quota (net of ``releasing``) with the
    workloads of their subtree sorted as victims.
    """

    def __init__(self, cy: Cycle) -> None:
        self.cy = cy
        tree = cy.tree
        n = len(tree)
        self.releasing: list[dict[str, int]] = [{} for _ in range(n)]
        #: Workloads finishing soon that a preemptor of this cycle waits for.
        self.awaited: set[int] = set()
        qindex = tree.index
        #: Per node index, the room victims in flight will release that no waiting
        #: preemptor's reservation claims (see :meth:`.cyclestate.Cycle.reserve`).
        self.inflight_spare: dict[int, dict[str, int]] = {}
        nindex = cy.nodes.index
        spare = self.inflight_spare
        for ws in cy.inflight.values():
            for v in ws:
                vq = qindex.get(v.quota)
                if vq is not None:
                    self._add_releasing(vq, v._request._d)
                for node_name, amount in v.assignment.items():
                    i = nindex.get(node_name)
                    if i is not None:
                        e = spare.setdefault(i, {})
                        for k, x in amount.raw.items():
                            e[k] = e.get(k, 0) + x
        for i, claimed in cy.inflight_claimed.items():
            left = spare.get(i)
            if left is not None:
                for k, x in claimed.items():
                    if k in left:
                        left[k] -= x
        # What waiting preemptors (nominated earlier, or chosen earlier in this cycle)
        # will add once admitted: capacity released inside their chain is theirs.
        self.incoming: list[dict[str, int]] = [{} for _ in range(n)]
        if cy.waiting:
            for q in cy.queues:
                for w in q.cands:
                    if w.id in cy.waiting:
                        self.arriving(cy.quota_of[w.id], w._request._d)
        self.by_quota: dict[int, list[tuple[VKey, WorkloadSpec]]] = {}
        self.over: dict[int, set[str]] = {}
        #: Quota nodes using more than their ``min`` (a guaranteed reclaim's victims).
        self.over_min: dict[int, set[str]] = {}
        mins = tree.mins
        for c in range(n):
            u = cy.used[c]
            if not u:
                continue
            rt = cy.runtime_base[c]
            rel = self.releasing[c]
            inc = self.incoming[c]
            over = {k for k, v in u.items() if v - rel.get(k, 0) + inc.get(k, 0) > rt.get(k, 0)}
            if over:
                self.over[c] = over
            m = mins[c]
            above = {k for k, v in u.items() if v - rel.get(k, 0) + inc.get(k, 0) > m.get(k, 0)}
            if above:
                self.over_min[c] = above
        self._subtree_lists: dict[int, OrderedVictims] = {}
        self._eligible: dict[tuple[EligKey, ...], frozenset[int]] = {}
        self._reclaim_lists: dict[tuple[bool, int, frozenset[str]], FilteredVictims] = {}

    def eligible_nodes(self, keys: tuple[EligKey, ...]) -> frozenset[int]:
        """The nodes any of the pod sets with eligibility ``keys`` may use (cached)."""
        got = self._eligible.get(keys)
        if got is None:
            nodes = self.cy.nodes
            got = frozenset(i for key in keys for i in nodes.eligible(key))
            self._eligible[keys] = got
        return got

    def arriving(self, qi: int, req: Mapping[str, int]) -> None:
        """Account a preemptor that will be admitted in quota ``qi``."""
        for c in self.cy.tree.chains[qi]:
            r = self.incoming[c]
            for k, x in req.items():
                r[k] = r.get(k, 0) + x

    def _add_releasing(self, vq: int, req: Mapping[str, int], sign: int = 1) -> None:
        for c in self.cy.tree.chains[vq]:
            r = self.releasing[c]
            for k, x in req.items():
                r[k] = r.get(k, 0) + sign * x

    def chosen(self, victims: list[WorkloadSpec]) -> None:
        """Account victims chosen in this cycle as releasing."""
        qindex = self.cy.tree.index
        for v in victims:
            vq = qindex.get(v.quota)
            if vq is not None:
                self._add_releasing(vq, v._request._d)

    def quota_list(self, qi: int) -> list[tuple[VKey, WorkloadSpec]]:
        got = self.by_quota.get(qi)
        if got is None:
            got = [
                ((v.priority, -(v.admitted_at or 0.0), -v.id), v)
                for v in self.cy.holding[qi]
                if v.phase != PREEMPTED and v.preemptible
            ]
            got.sort(key=first)
            self.by_quota[qi] = got
        return got

    def subtree_list(self, x: int) -> OrderedVictims:
        """The holdings of ``x``'s subtree (-1: of every tree) in victim order."""
        roots = self.cy.tree.roots
        if x < 0 and len(roots) == 1:
            x = roots[0]
        got = self._subtree_lists.get(x)
        if got is None:
            holding = self.cy.holding
            got = OrderedVictims(
                [
                    ((v.priority, -(v.admitted_at or 0.0), -v.id), v, vq)
                    for vq in (self.cy.tree.subtree(x) if x >= 0 else range(len(holding)))
                    for v in holding[vq]
                    if v.phase != PREEMPTED and v.preemptible
                ]
            )
            self._subtree_lists[x] = got
        return got

    def reclaim_list(self, by_min: bool, top: int, keys: frozenset[str]) -> FilteredVictims:
        """Reclaim candidates below ``top`` (-1: every tree), in victim order.

        The workloads of every quota in ``top``'s subtree that is above its runtime
        quota (``by_min``: above its min) in one of ``keys``, and of their
        descendants; each comes with the *lowest* such quota on its path. A search
        excludes the preemptor's own chain from the over quotas: a workload is then
        still a candidate exactly when its lowest over quota is not on that chain
        (any higher one is an ancestor of it, hence on the chain too). One per cycle
        and key, filtered as far as searches read it: a search costs what it reads,
        not a pass over every quota.
        """
        ck = (by_min, top, keys)
        got = self._reclaim_lists.get(ck)
        if got is None:
            tree = self.cy.tree
            source = self.over_min if by_min else self.over
            lo, hi = (top, top + tree.size[top]) if top >= 0 else (0, len(tree))
            base = {x for x, over in source.items() if lo <= x < hi and not over.isdisjoint(keys)}
            chains = tree.chains
            lowest: dict[int, int] = {}
            for vq in range(lo, hi):
                for a in chains[vq]:
                    if a in base:
                        lowest[vq] = a
                        break
            got = FilteredVictims(self.subtree_list(top), lowest)
            self._reclaim_lists[ck] = got
        return got


def _share(
    used: Mapping[str, int],
    runtime: Mapping[str, int],
    less: Mapping[str, int] | None,
    add: Mapping[str, int] | None = None,
) -> float:
    """``max_r (used - less + add) / runtime`` over resources with a positive amount."""
    keys = set(used)
    if add:
        keys.update(add)
    best = 0.0
    for k in keys:
        amount = used.get(k, 0) - (less.get(k, 0) if less else 0) + (add.get(k, 0) if add else 0)
        if amount <= 0:
            continue
        cap = runtime.get(k, 0)
        if cap <= 0:
            return math.inf
        s = amount / cap
        if s > best:
            best = s
    return best


def search_key(queue: int, qi: int, within_min: bool, aged: bool) -> tuple[int, int, int]:
    """Which of its queue's victim searches a candidate of quota ``qi`` may use in a
    cycle: one for candidates within their quota's min, one for aged ones, one for the
    rest (``Cycle.search_key``; the forecast's at the cycle's instant)."""
    return (queue, qi, 2 if within_min else 1 if aged else 0)


def awaited_by(
    v: WorkloadSpec,
    now: float,
    grace: float,
    history: Mapping[str, tuple[float, float]],
    start: float | None = None,
) -> float | None:
    """Until when ``v`` is awaited rather than evicted, or None: not finishing soon.

    Expected to end within the grace period (its declared runtime, else its queue's
    p50 in ``history``, from its start: ``start``, else ``v.started_at``, else ``now``):
    better wait than evict. A workload past its expected end is still about to end only
    while it has overrun by less than the grace period too: past that, when it ends is
    not known, and waiting for it could last for ever (it was awaited, cycle after
    cycle, while it ran on). The forecast's simulation asks it too
    (:func:`.forecast_preempt.preempt`), with the start in virtual time.
    """
    if grace <= 0:
        return None
    total = v.expected_runtime_s
    if total is None or total <= 0:
        hist = history.get(v.queue)
        total = hist[0] if hist else None
    if total is None or total <= 0:
        return None
    if start is None:
        start = v.started_at if v.started_at is not None else now
    end = start + total
    if end - now > grace or now - end > grace:
        return None
    return end + grace


def find_victims(cy: Cycle, w: WorkloadSpec, qi: int, spec: QueueSpec) -> Found | None:
    """Victims that let ``w`` (in quota ``qi``, queue ``spec``) fit, or None.

    Returns ``(victims, [(reason, message)], per_node placement, freed per quota chain
    node, freed per node index)``.
    """
    pre: Preemptor | None = getattr(cy, "preemptor", None)
    if pre is None:
        pre = Preemptor(cy)
        cy.preemptor = pre
    tree = cy.tree
    req = w._request._d
    if not req:
        return None
    chains = tree.chains
    chain = chains[qi]
    chain_set = set(chain)
    maxes = tree.maxes
    size = tree.size
    for c in chain:
        mx = maxes[c]
        for k, amount in req.items():
            if k in mx and amount > mx[k]:
                return None  # never fits its own quota: nothing to win
    used = cy.used
    runtime = cy.runtime_base
    mins = tree.mins
    releasing = pre.releasing
    skip = cy.victim_ids
    limit = cy.limit_base

    incoming = pre.incoming

    # -- what is missing --------------------------------------------------------------
    # Counted on projected usage: what holds now, minus what victims already chosen
    # will release, plus what preemptors already waiting will take. Without it two
    # preemptors of one cycle would each free the same shortfall.
    need: dict[int, dict[str, int]] = {}
    for c in chain:
        u = used[c]
        rel = releasing[c]
        inc = incoming[c]
        lim = limit[c]
        for k, amount in req.items():
            d = u.get(k, 0) - rel.get(k, 0) + inc.get(k, 0) + amount - lim.get(k, 0)
            if d > 0:
                need.setdefault(c, {})[k] = d
    allow_inq = spec.preempt_within_quota != "Never"
    allow_reclaim = spec.reclaim != "Never"
    specs = cy.queue_specs
    now_ = cy.now
    w_aged = w.queue_order_at <= aged_before(spec, now_)

    def ahead(v: WorkloadSpec) -> bool:
        """Whether ``v`` ranks ahead of ``w`` by queue priority or age (:func:`.aging.admitted_ahead`)."""
        return bool(admitted_ahead(specs.get(v.queue), spec, v, w, w_aged))

    if qi in need:
        # Only the quota's own workloads lower its own usage.
        if not allow_inq:
            return None
        have: dict[str, int] = {}
        for _, v in pre.quota_list(qi):
            if v.priority >= w.priority:
                break
            if v.id in skip or ahead(v):
                continue
            for k, x in v._request._d.items():
                have[k] = have.get(k, 0) + x
        if any(have.get(k, 0) < d for k, d in need[qi].items()):
            return None
    top = max(need, key=lambda c: -len(chains[c])) if need else -1  # nearest the root

    nodes = cy.nodes
    reqs = cy.reqs(w)
    elig_nodes = pre.eligible_nodes(tuple(ps.elig for ps in reqs))
    nindex = nodes.index
    guaranteed_keys = [k for k in req if mins[qi].get(k, 0) > 0]
    # Quota fits, nodes do not, and the preemptor claims its guarantee: reclaim from
    # whoever uses more than its min on the nodes it needs. (within_min() below, before
    # anything is freed.)
    by_min = False
    if not need and allow_reclaim and guaranteed_keys:
        u, rel, inc, m = used[qi], releasing[qi], incoming[qi], mins[qi]
        by_min = all(
            u.get(k, 0) - rel.get(k, 0) + inc.get(k, 0) + req[k] <= m[k] for k in guaranteed_keys
        )

    # -- nothing to win on nodes within the budget ---------------------------------------
    # Only nodes are short and the reclaim candidates come first: if the first
    # MAX_EXAMINED_NODES_ONLY of them the loop below would examine (not chosen
    # already, not on the preemptor's chain) hold nothing on a node it may use, the
    # loop ends empty-handed -- found out here by counting, not by examining them (the
    # 60k cycle: over a thousand such searches, for quotas within their min). Asked
    # first: it is the cheapest way out, and every way out before the greedy loop
    # returns None without changing anything (here: before the streams and helpers of
    # the search are even made -- 1,315 of the 60k cycle's 2,053 searches end here).
    if not need and allow_reclaim:
        keys = frozenset(req)
        flt = pre.reclaim_list(by_min, top, keys)
        n, counts, ids = flt.useless_prefix(elig_nodes, keys, nindex)
        if n >= MAX_EXAMINED_NODES_ONLY:
            n -= sum(counts.get(x, 0) for x in chain)
            if n >= MAX_EXAMINED_NODES_ONLY:
                # Those chosen or awaited already, off the preemptor's chain. (An id
                # both chosen and awaited is counted twice: fewer, never more.)
                gone, by_low = flt.useless_gone(elig_nodes, keys, ids, skip, pre.awaited)
                gone -= sum(by_low.get(x, 0) for x in chain_set)
                if n - gone >= MAX_EXAMINED_NODES_ONLY:
                    return None

    # -- candidate streams, in preference order ------------------------------------------
    def reclaim_stream() -> Iterator[tuple[VKey, WorkloadSpec, int]]:
        # Workloads in the subtrees of quotas above their runtime quota (or min) in a
        # resource it asks, other than those of the preemptor's own chain, below
        # ``top`` (see Preemptor.reclaim_list).
        for key, v, vq, lowest in pre.reclaim_list(by_min, top, frozenset(req)):
            if lowest not in chain_set:
                yield key, v, vq

    def inqueue_stream() -> Iterator[tuple[VKey, WorkloadSpec, int]]:
        for key, v in pre.quota_list(qi):
            if v.priority >= w.priority:
                return
            if not ahead(v):
                yield key, v, qi

    streams: list[Iterator[tuple[VKey, WorkloadSpec, int]]] = []
    if allow_reclaim and (not need or any(c != qi for c in need)):
        streams.append(reclaim_stream())
    if allow_inq:
        streams.append(inqueue_stream())
    if not streams:
        return None

    grace = cy.config.preempt_grace_s
    now = cy.now
    history = cy.snapshot.runtime_history

    if not need:
        # Its quota fits once the evictions under way have ended, and the nodes hold it
        # as they are: no victim helps, it waits for those evictions. (Taking one would
        # evict work just admitted elsewhere, e.g. the preemptor that made a quota's room
        # -- ping-pong found by the property test, seed 64100.) A shape that failed to
        # place this cycle fails again (capacity only shrinks): no second placement.
        if cy.shape(w) not in cy.failed_shapes and nodes.place(reqs) is not None:
            return None
        # Nor when the nodes hold it once those evictions have ended, counting only the
        # room no waiting preemptor has reserved: evicting more for room on nodes that is
        # about to be free takes a quota below its min, which takes it back next cycle
        # (the property test, seed 59090703: q1's preemptors left q0 under its min and
        # q0's next job reclaimed from q1 for room the evictions were freeing anyway).
        spare = pre.inflight_spare
        if spare and nodes.place(reqs, spare) is not None:
            return None
    lower_only = spec.reclaim == "LowerPriority"

    freed: dict[int, dict[str, int]] = {}
    extra: dict[int, dict[str, int]] = {}
    chosen: list[tuple[WorkloadSpec, int]] = []

    def add(v: WorkloadSpec, vq: int, sign: int) -> None:
        vr = v._request._d
        for c in chains[vq]:
            f = freed.setdefault(c, {})
            for k, x in vr.items():
                f[k] = f.get(k, 0) + sign * x
            nc = need.get(c)
            if nc is not None:
                for k in nc:
                    nc[k] -= sign * vr.get(k, 0)
        for node_name, amount in v.assignment.items():
            i = nindex.get(node_name)
            if i is None:
                continue
            e = extra.setdefault(i, {})
            for k, x in amount.raw.items():
                e[k] = e.get(k, 0) + sign * x

    def net(x: int, k: str) -> int:
        return (
            used[x].get(k, 0)
            - releasing[x].get(k, 0)
            + incoming[x].get(k, 0)
            - freed.get(x, {}).get(k, 0)
        )

    def within_min() -> bool:
        # Within its guarantee in every resource its min names (a quota that guarantees
        # cpu but not memory is not "borrowing" because it uses memory).
        if not guaranteed_keys:
            return False
        m = mins[qi]
        return all(net(qi, k) + req[k] <= m[k] for k in guaranteed_keys)

    def fair_ok(vq: int) -> bool:
        less_q = _merge(releasing[qi], freed.get(qi), incoming[qi])
        less_v = _merge(releasing[vq], freed.get(vq), incoming[vq])
        return _share(used[qi], runtime[qi], less_q, req) <= _share(used[vq], runtime[vq], less_v)

    #: Victims held beyond their quota's max, and that quota's share with them, where
    #: the preemptor's share with it is below that (see ``beyond_fair``).
    over_share: dict[int, float] = {}

    def beyond_fair(v: WorkloadSpec, vq: int) -> None:
        """Work a quota holds beyond its max (a max lowered under running work) is no
        share of its own: fair share may take it where the preemptor's share with it
        stays below that quota's share *with* the work (Kueue's second fair-sharing
        strategy, LessThanInitialShare), not only below its share without it. By that
        first rule alone the quota's share without it could fall below the
        preemptor's, and the work beyond the max stayed while the work within it,
        which the min protects (victim_lists.kept_within_max), could not be taken.
        Only where the quota keeps its min without it: below its min, it would reclaim
        the room back at once (the property test, seed 1303: a min above the max)."""
        vr = v._request._d
        mx = maxes[vq]
        if (
            not mx
            or tree.children[vq]
            or not any(x and k in mx and held(vq, k) > mx[k] for k, x in vr.items())
        ):
            return  # (the common case: a quota within its max; or one with children)
        if any(x and held(vq, k) - x < mins[vq].get(k, 0) for k, x in vr.items()):
            return
        gone = {u.id for u, _ in chosen}
        if not held_beyond_max(cy.holding[vq], v, mx, lambda k: held(vq, k), skip, gone):
            return
        mine = _share(
            used[qi], runtime[qi], _merge(releasing[qi], freed.get(qi), incoming[qi]), req
        )
        theirs = _share(used[vq], runtime[vq], _merge(releasing[vq], freed.get(vq), incoming[vq]))
        if mine < theirs:
            over_share[v.id] = theirs

    def fair(v: WorkloadSpec, vq: int) -> bool:
        return v.id in over_share or fair_ok(vq)

    def reclaim_ok(v: WorkloadSpec, vq: int) -> bool:
        """Is ``v``'s subtree still borrowing, and does taking it respect every min?

        Borrowing is using more than the runtime quota; for a guaranteed reclaim on
        nodes (``by_min``), more than the ``min`` -- and then the preemptor's own chain
        up to the common ancestor must stay within its ``min`` with it.
        """
        vr = v._request._d
        borrowing = False
        for x in chains[vq]:
            if x in chain_set:
                if by_min and not chain_within_min(x):
                    return False
                break  # reached the lowest common ancestor
            rt = mins[x] if by_min else runtime[x]
            m = mins[x]
            for k in req:
                a = net(x, k)
                if a > rt.get(k, 0):
                    borrowing = True
                t = vr.get(k, 0)
                if t and not (keeps(v, x, k, a - t) if x == vq else a - t >= m.get(k, 0)):
                    return False
            if by_min:
                # Taken for room on nodes, it gives up all it holds: no min may break,
                # counting only what the quota holds (not preemptors still to arrive).
                for k, t in vr.items():
                    left = held(x, k) - t
                    if t and not (keeps(v, x, k, left) if x == vq else left >= m.get(k, 0)):
                        return False
        return borrowing

    def keeps(v: WorkloadSpec, vq: int, k: str, left: int) -> bool:
        # Its own quota's min, judged within its max if it holds more than that (a max
        # lowered under running work: victim_lists.keeps_min).
        m, mx = mins[vq].get(k, 0), maxes[vq].get(k)
        h = held(vq, k)
        if mx is None or h <= mx or tree.children[vq]:
            return left >= m  # (the common case; and a quota with children of its own)
        gone = {u.id for u, _ in chosen}
        return keeps_min(cy.holding[vq], v, k, (m, mx), left, h, skip, gone)

    def held(x: int, k: str) -> int:
        return used[x].get(k, 0) - releasing[x].get(k, 0) - freed.get(x, {}).get(k, 0)

    def chain_within_min(lca: int) -> bool:
        """Whether every quota of ``w``'s chain below ``lca`` stays within its min."""
        for x in chain:
            if x == lca:
                return True
            m = mins[x]
            keys = [k for k in req if m.get(k, 0) > 0]
            if not keys or any(net(x, k) + req[k] > m[k] for k in keys):
                return False
        return True

    def useful(v: WorkloadSpec, vq: int) -> bool:
        vr = v._request._d
        open_need = False
        for c, nc in need.items():
            if any(d > 0 for d in nc.values()):
                open_need = True
                if c <= vq < c + size[c] and any(d > 0 and vr.get(k, 0) for k, d in nc.items()):
                    return True
        if open_need:
            return False
        for node_name, amount in v.assignment.items():
            i = nindex.get(node_name)
            if i is not None and i in elig_nodes and amount.raw.keys() & req.keys():
                return True
        return False

    placements_left = MAX_PLACEMENTS

    def fits() -> dict[int, dict[str, int]] | None:
        nonlocal placements_left
        if any(d > 0 for nc in need.values() for d in nc.values()):
            return None
        if placements_left <= 0:
            return None
        placements_left -= 1
        pl = nodes.place(reqs, extra)
        return None if pl is None else pl.per_node

    # -- greedy ----------------------------------------------------------------------
    found: dict[int, dict[str, int]] | None = None
    examined = 0
    budget = MAX_EXAMINED if need else MAX_EXAMINED_NODES_ONLY
    for stream in streams:
        for _, v, vq in stream:
            if v.id in skip or v.id in pre.awaited:
                continue
            examined += 1
            if examined > budget:
                break
            if vq != qi:
                if vq in chain_set:
                    continue  # workloads attached to an ancestor are not "other quotas"
                if lower_only and v.priority >= w.priority:
                    continue
            if not useful(v, vq):
                continue
            if vq != qi and not reclaim_ok(v, vq):
                continue
            if vq != qi:
                beyond_fair(v, vq)  # judged on the victim's quota with it
            add(v, vq, 1)
            # Outside the preemptor's min only fair share may take it -- and not work
            # admitted by age ahead of the preemptor: admitted on its aged claim, it
            # borrows beyond its quota's share without claims, and taking it sent it
            # back to claim again (gpu-heavy: one 8-GPU job evicted 16 times).
            if vq != qi and not within_min() and (ahead(v) or not fair(v, vq)):
                add(v, vq, -1)
                continue
            chosen.append((v, vq))
            found = fits()
            if found is not None:
                break
        if found is not None or examined > budget or placements_left <= 0:
            break
    if found is None:
        return None
    placed: dict[int, dict[str, int]] = found

    # -- add back: drop every victim the preemptor can do without ----------------------
    if len(chosen) > 1:
        for v, vq in list(reversed(chosen)):
            add(v, vq, -1)
            pl = fits() if placements_left > 0 else None
            if pl is not None and all(
                vq2 == qi or within_min() or (fair(v2, vq2) and not ahead(v2))
                for v2, vq2 in chosen
                if v2 is not v
            ):
                chosen.remove((v, vq))
                placed = pl
            else:
                add(v, vq, 1)

    until = [(v, t) for v, _ in chosen if (t := awaited_by(v, now, grace, history)) is not None]
    if until:
        # Wait for all of them rather than evict some now: the next cycle, woken by
        # their completion, searches again and evicts only if still needed (and, past
        # the latest of their deadlines, evicts what still runs).
        awaited = [v for v, _ in until]
        pre.awaited.update(v.id for v in awaited)
        cy.awaiting[w.id] = tuple(v.id for v in awaited)
        cy.awaited_until[w.id] = max(t for _, t in until)
        pre.chosen(awaited)
        pre.arriving(qi, req)
        return [], [], placed, freed, extra

    # -- reasons -----------------------------------------------------------------------
    reasons: list[tuple[str, str]] = []
    guaranteed = within_min()
    for v, vq in chosen:
        if vq == qi:
            reasons.append(
                (
                    INQUEUE,
                    f"preempted by {w.name} (priority {w.priority} > {v.priority}) "
                    f"in quota {w.quota}",
                )
            )
        elif guaranteed:
            reasons.append(
                (
                    RECLAIM,
                    f"quota {w.quota} reclaims its guaranteed share from quota {v.quota}, "
                    f"which uses more than its {'min' if by_min else 'runtime quota'} "
                    f"(for {w.name})",
                )
            )
        else:
            if ahead(v) or not fair(v, vq):
                return None
            mine = _share(
                used[qi], runtime[qi], _merge(releasing[qi], freed.get(qi), incoming[qi]), req
            )
            theirs = _share(
                used[vq], runtime[vq], _merge(releasing[vq], freed.get(vq), incoming[vq])
            )
            if not fair_ok(vq):
                reasons.append(
                    (
                        FAIRSHARE,
                        f"fair share: quota {w.quota} with {w.name} would be at "
                        f"{mine:.2f} of its runtime quota, quota {v.quota} at "
                        f"{over_share[v.id]:.2f} with this workload, which it holds "
                        f"beyond its max",
                    )
                )
                continue
            reasons.append(
                (
                    FAIRSHARE,
                    f"fair share: quota {w.quota} with {w.name} would be at "
                    f"{mine:.2f} of its runtime quota, quota {v.quota} at {theirs:.2f} "
                    f"without this workload",
                )
            )
    victims = [v for v, _ in chosen]
    pre.chosen(victims)
    pre.arriving(qi, req)
    return victims, reasons, placed, freed, extra


def _merge(
    a: Mapping[str, int], b: Mapping[str, int] | None, minus: Mapping[str, int] | None = None
) -> dict[str, int]:
    """``a + b - minus``: what to subtract from usage (released, minus arriving)."""
    out = dict(a)
    if b:
        for k, v in b.items():
            out[k] = out.get(k, 0) + v
    if minus:
        for k, v in minus.items():
            out[k] = out.get(k, 0) - v
    return out

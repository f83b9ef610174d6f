"""Room no candidate of its quota can use this cycle, lent to work that fits it.

The runtime quota split (:mod:`.quota`) gives each quota a share by weight, and a
share is not cut to what its quota's work can use: when every waiting workload of a
quota asks more than its share leaves, and another quota's workload is short of its
own share by no more than that, the split leaves the room idle while both wait. In
the demo world (seed 10) 32 of 64 GPUs stayed idle for half a minute while two 16-GPU
gangs fell 4 and 7 GPUs short of their quotas' shares. Kueue admits such work by
borrowing the cohort's unused quota.

After the tournament everything that fits its share has started, so what is left of a
share no candidate of its quota can use this cycle. Each candidate still short of its
runtime quota may then borrow (:func:`lend`), in the tournament's order (queue
priority, the aged first, then fair share): at each level of its chain where it
passes its quota's limit, the gap is taken from its parent's room that the split gave
no child (it follows demand), then from its siblings' shares beyond what they keep --
their load, the guaranteed min their demand holds (:meth:`.quota.QuotaTree._base`),
and what their aged heads claim (:mod:`.aging`) -- and it is admitted if its pods
place on the nodes. The work that waited behind a strict-order head that borrowed
goes on after it (:func:`_behind`).

Never beyond a max, never a guaranteed min, never to a quota whose shared weight for
the resource is 0 (it borrows nothing, as in the split), nor to one whose children get
less than their mins (what it gets would be theirs first). An aged head's claim is lent
only to work declared to end before that head can start (it waits for its own
quota's work to end first), as drains are backfilled: a head whose own quota ran 2
of its 4 cpu until t=1890 claimed more of its parent each second from t=997, and a
sibling's 2-cpu job waited beside 2 idle cpu until the head had run, at t=2490.

The split is made afresh next cycle, so the room is its lender's again as soon as its
work can use it and the borrower's work ends: what is lent is never a min, and only
work within its min reclaims by preemption (:mod:`.preemption`), so a borrower is not
evicted for it; the lender's aged heads claim it back as work ends (:mod:`.aging`).
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from queueing.engine.cyclestate import F_NODES, F_NPMIN, F_POLICY, F_QUOTA, F_WAITING
from queueing.engine.resources import Resources

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState, QueueState
    from queueing.engine.types import WorkloadSpec

__all__ = ["MAX_ATTEMPTS", "lend"]

_Entry = tuple[int, int, float, int, float, int, tuple[int, int], int, int]

#: At most this many candidates try to borrow per cycle (each tries once; of each
#: queue and quota, those after one that could not borrow do not try).
MAX_ATTEMPTS = 256


class _Lender:
    """The shares of one cycle's quotas that may be lent, worked out as asked.

    A share is worked out for a borrower that may use the room of the first ``n``
    claims of ``later`` (:meth:`lendable`): the room an aged head claims is lent only
    to work that ends before that head can start (:meth:`head_start`), as drains are
    backfilled (``Cycle.place_backfill``).
    """

    def __init__(self, cy: CycleState) -> None:
        self.cy = cy
        tree = cy.tree
        self.tree = tree
        #: Per quota (subtree), what its aged heads claim beyond its load.
        self.claimed: list[dict[str, int]] | None = None
        #: The claims whose heads cannot start now (they wait for their own quota's
        #: work to end): (when they can, quota, what the claim holds beyond its load),
        #: the latest first. A borrower that ends by the start of the first ``n`` may
        #: use their room (:meth:`lendable`).
        self.later: list[tuple[float, int, dict[str, int]]] = []
        got = cy.claims
        if got is not None:
            heads = got.heads
            own: list[dict[str, int]] = []
            for i, c in enumerate(got):
                load = cy.load[i]
                extra = {k: v - load.get(k, 0) for k, v in c.items() if v > load.get(k, 0)}
                own.append(extra)
                if extra:
                    start = self.head_start(i, heads[i])
                    if start > cy.now:
                        self.later.append((start, i, extra))
            self.claimed = tree.subtree_sums(own)
            self.later.sort(key=lambda x: -x[0])
        self._spare: dict[tuple[int, str, int], int] = {}
        self._total: dict[tuple[int, str, int], int] = {}
        #: Quotas whose limit changed since the caches above were last pruned.
        self._changed: set[int] = set()

    def head_start(self, qi: int, head: WorkloadSpec | None) -> float:
        """When ``head``, whose claim quota ``qi`` holds, can start at the earliest as
        far as its own quota goes: now if it fits under the quota's max beside what the
        quota runs, else once enough of that work has ended (each at the latest its
        declared runtime, :meth:`.CycleState.latest_end`)."""
        cy = self.cy
        if head is None:
            return cy.now
        used = cy.used[qi]
        mx = self.tree.maxes[qi]
        over = {
            k: used.get(k, 0) + v - mx[k]
            for k, v in head._request._d.items()
            if k in mx and used.get(k, 0) + v > mx[k]
        }
        if not over:
            return cy.now
        quota_of = cy.quota_of
        running = [*cy.holding[qi], *(w for w in cy.admitted_ws if quota_of.get(w.id) == qi)]
        for t, w in sorted(((cy.latest_end(w), w) for w in running), key=lambda tw: tw[0]):
            for k in list(over):
                left = over[k] - w._request._d.get(k, 0)
                if left > 0:
                    over[k] = left
                else:
                    del over[k]
            if not over:
                return t
        return math.inf

    def keep(self, s: int, k: str, n: int) -> int:
        """What quota ``s`` keeps of resource ``k`` whatever its siblings need, from a
        borrower that may use the room of the first ``n`` claims of ``later``."""
        cy = self.cy
        kept = cy.load[s].get(k, 0)
        if self.claimed is not None:
            kept += self.claimed[s].get(k, 0)
            if n:
                last = s + self.tree.size[s]
                for _, q, extra in self.later[:n]:
                    if s <= q < last:
                        kept -= extra.get(k, 0)
        base = self.tree._base(s, k, cy.demand[s].get(k, 0))
        return kept if kept > base else base

    def spare(self, s: int, k: str, n: int) -> int:
        """How much of ``k`` can be taken from quota ``s``'s limit: beyond what it keeps,
        and (when quotas sit below it) no more than its room not split among them plus
        what they can spare."""
        key = (s, k, n)
        got = self._spare.get(key)
        if got is not None:
            return got
        cy = self.cy
        lim = cy.limit[s].get(k, 0)
        got = lim - self.keep(s, k, n)
        kids = self.tree.children[s]
        if got > 0 and kids:
            below = self.unassigned(s, k) + sum(self.spare(c, k, n) for c in kids)
            if below < got:
                got = below
        got = max(0, got)
        self._spare[key] = got
        return got

    def unassigned(self, p: int, k: str) -> int:
        """What of ``k`` quota ``p`` has that the split gave none of its children (it
        follows demand, and some demand takes no share: ``QuotaTree.runtime``)."""
        cy = self.cy
        kids = self.tree.children[p]
        free = (
            cy.limit[p].get(k, 0)
            - cy.own_demand[p].get(k, 0)
            - sum(cy.limit[c].get(k, 0) for c in kids)
        )
        return free if free > 0 else 0

    def spare_beside(self, x: int, k: str, n: int) -> int:
        """What quota ``x`` can borrow of ``k`` at its level: its parent's room no child
        was given, and what its siblings can spare."""
        p = self.tree.parent[x]
        key = (p, k, n)
        total = self._total.get(key)
        if total is None:
            total = self._total[key] = self.unassigned(p, k) + sum(
                self.spare(s, k, n) for s in self.tree.children[p]
            )
        return total - self.spare(x, k, n)

    def take(self, s: int, k: str, amount: int, n: int) -> None:
        """Take ``amount`` of ``k`` from quota ``s``'s limit (and runtime quota), and from
        the quotas below it what they then get beyond it."""
        cy = self.cy
        self._changed.add(s)
        lim = cy.limit[s]
        lim[k] = lim.get(k, 0) - amount
        rt = cy.runtime[s]
        rt[k] = rt.get(k, 0) - amount
        kids = self.tree.children[s]
        if not kids:
            return
        over = sum(cy.limit[c].get(k, 0) for c in kids) - (lim[k] - cy.own_demand[s].get(k, 0))
        if over > 0:  # (else taken from its room no child was given)
            self.take_from(kids, k, over, n)

    def take_from(self, quotas: list[int], k: str, amount: int, n: int) -> list[int]:
        """Take ``amount`` of ``k`` from ``quotas``' spare room, the largest first;
        returns those it took from."""
        names = self.tree.names
        took: list[int] = []
        for s in sorted(quotas, key=lambda s: (-self.spare(s, k, n), names[s])):
            t = min(amount, self.spare(s, k, n))
            if t > 0:
                self.take(s, k, t, n)
                took.append(s)
                amount -= t
                if amount <= 0:
                    break
        return took

    def give(self, x: int, k: str, amount: int, n: int) -> list[int]:
        """Lend ``amount`` of ``k`` to quota ``x``: its parent's room no child was given
        first, then from its siblings, the largest spare first. Returns the lenders (the
        parent for its room no child was given)."""
        cy = self.cy
        p = self.tree.parent[x]
        free = min(amount, self.unassigned(p, k))
        lenders = [p] if free else []
        if amount > free:
            sibs = [s for s in self.tree.children[p] if s != x]
            lenders += self.take_from(sibs, k, amount - free, n)
        self._changed.add(x)
        lim = cy.limit[x]
        lim[k] = lim.get(k, 0) + amount
        rt = cy.runtime[x]
        rt[k] = rt.get(k, 0) + amount
        return lenders

    def plan(self, w: WorkloadSpec, qi: int, n: int) -> list[tuple[int, str, int]] | None:
        """Where ``w`` (using ``n`` claims' room) needs to borrow along its chain, as (quota,
        resource, gap), or None when it would pass a max or may not borrow enough
        (see the module's docstring)."""
        cy = self.cy
        tree = self.tree
        req = w._request._d
        out: list[tuple[int, str, int]] = []
        for x in tree.chains[qi]:
            lx = cy.limit[x]
            ldx = cy.load[x]
            mx = tree.maxes[x]
            for k, v in req.items():
                if v <= 0:
                    continue
                m = mx.get(k)
                if m is not None and ldx.get(k, 0) + v > m:
                    return None
                gap = ldx.get(k, 0) + v - lx.get(k, 0)
                if gap <= 0:
                    continue
                if (
                    tree.parent[x] < 0
                    or tree.nodes[x].weight(k) <= 0  # it borrows nothing, by its admin's choice
                    or self.short_of_min(x, k)
                    or self.spare_beside(x, k, n) < gap
                ):
                    return None
                out.append((x, k, gap))
        return out

    def short_of_min(self, x: int, k: str) -> bool:
        """Whether a quota below ``x`` gets less of ``k`` than the min its demand holds
        (the split scaled the mins down: ``x`` had too little for them). Room lent to
        ``x`` would be theirs first, as the split serves mins before anything else."""
        cy = self.cy
        tree = self.tree
        for c in tree.children[x]:
            if cy.limit[c].get(k, 0) < tree._base(c, k, cy.demand[c].get(k, 0)):
                return True
        return False

    def lend(self, w: WorkloadSpec, qi: int, *, untried: bool = False) -> bool:
        """Admit ``w`` on borrowed room if it can borrow what it lacks and its pods
        place; whether it was admitted. ``untried``: ``w`` was not tried this cycle
        (it waited behind a head), so it is admitted too if it fits without borrowing."""
        cy = self.cy
        if not w.preemptible and cy.np_short(w, qi):
            return False  # non-preemptible work starts only within its quota's min
        n = self.lendable(w)
        plan = self.plan(w, qi, n)
        if plan is None or (not plan and not untried):
            return False  # (an empty plan: it fits its quota, it failed on something else)
        shape = cy.shape(w)
        if shape in cy.failed_shapes:
            return False
        pl = cy.nodes.place(cy.reqs(w))
        if pl is None:
            cy.failed_shapes.add(shape)
            return False
        lent: dict[str, int] = {}
        lenders: list[int] = []
        req = w._request._d
        for x, k, gap in plan:
            lenders += [s for s in self.give(x, k, gap, n) if s not in lenders]
            # What of its own request runs on lent room: a quota already beyond its
            # share (its running work admitted before the split moved) borrows more
            # than the workload asks, but only the request is this workload's.
            mine = min(gap, req[k])
            if mine > lent.get(k, 0):
                lent[k] = mine
        names = self.tree.names
        cy.admit(
            w,
            qi,
            pl.per_node,
            pl.placements,
            lent=Resources.from_raw(lent),
            lent_by=tuple(names[s] for s in lenders),
        )
        cy.fail.pop(w.id, None)
        self._forget(qi)
        return True

    def _forget(self, qi: int) -> None:
        """Drop what the caches hold of the quotas an admission into ``qi`` changed:
        its chain (their load) and the quotas whose limit was lent or taken, with every
        quota above them (a quota's spare counts its children's)."""
        chains = self.tree.chains
        dirty = set(chains[qi])
        for c in self._changed:
            dirty.update(chains[c])
        self._changed.clear()
        self._spare = {key: v for key, v in self._spare.items() if key[0] not in dirty}
        self._total = {key: v for key, v in self._total.items() if key[0] not in dirty}

    def lendable(self, w: WorkloadSpec) -> int:
        """How many claims of ``later`` may lend ``w`` their room: those whose heads
        start no sooner than ``w`` ends at the latest if admitted now. Only work with a
        declared runtime (a limit), as drains are backfilled (``Cycle.place_backfill``)."""
        rt = w.expected_runtime_s
        if not self.later or rt is None or rt <= 0 or not self.cy.config.backfill:
            return 0
        end = self.cy.now + rt
        n = 0
        for start, _, _ in self.later:
            if start < end:
                break
            n += 1
        return n


def lend(cy: CycleState) -> tuple[int, int]:
    """Admit candidates short of their runtime quota on shares their siblings cannot
    use this cycle (see the module's docstring); returns how many tried to borrow and
    how many were admitted (with those that went on behind a strict-order head that
    borrowed)."""
    fail = cy.fail
    quota_of = cy.quota_of
    admitted = cy.admitted_ids
    unusable = cy.unusable_ids
    # Per queue and quota, its candidates short of their runtime quota, in queue order,
    # up to a waiting preemptor (it goes first: borrowing, the work behind it would
    # pass it).
    lists: dict[tuple[int, int], list[WorkloadSpec]] = {}
    fail_get = fail.get  # (60k candidates at 60k pending: bound once)
    for q in cy.queues:
        closed: set[int] = set()
        for w in q.cands:
            wid = w.id
            f = fail_get(wid)
            if f is None:
                continue
            kind = f[0]
            if (kind != F_QUOTA and kind != F_WAITING) or wid in admitted:
                continue
            qi = quota_of[wid]
            if kind == F_WAITING:
                closed.add(qi)
            elif qi not in closed and wid not in unusable:
                lists.setdefault((q.index, qi), []).append(w)
    if not lists:
        return 0, 0
    before = len(cy.admissions)
    lender = _Lender(cy)
    score = cy.fair.score
    qver = cy.qver
    queues = cy.queues

    def entry(key: tuple[int, int], i: int) -> _Entry:
        # The tournament's order (Cycle.tournament): queue priority, the aged first
        # (oldest first), then fair share, priority, time.
        q = queues[key[0]]
        w = lists[key][i]
        tier = 0 if q.aged(w) else 1
        s = w.queue_order_at if tier == 0 else score(key[1], w._request._d)
        return (
            -q.spec.priority,
            tier,
            s,
            -w.priority,
            w.queue_order_at,
            w.id,
            key,
            i,
            qver[key[1]],
        )

    heap = [entry(key, 0) for key in lists]
    heapq.heapify(heap)
    tried = 0
    while heap and tried < MAX_ATTEMPTS:
        e = heapq.heappop(heap)
        key, i, ver = e[6], e[7], e[8]
        qi = key[1]
        if e[1] and ver != qver[qi]:
            again = entry(key, i)
            if again[2] > e[2]:
                heapq.heappush(heap, again)
                continue
        w = lists[key][i]
        tried += 1
        if not lender.lend(w, qi):
            continue
        _behind(cy, lender, queues[key[0]], qi, w.id)
        if i + 1 < len(lists[key]):
            heapq.heappush(heap, entry(key, i + 1))
    return tried, len(cy.admissions) - before


def _behind(cy: CycleState, lender: _Lender, q: QueueState, qi: int, head: int) -> None:
    """The work of quota ``qi`` that waited behind ``head`` in queue ``q`` (its strict
    order, or the room an aged head held), now that ``head`` has started: each goes on
    in queue order, borrowing where it must, until one does not fit; in a strict-order
    queue that one is the head the rest wait behind. (Left behind a head that started,
    their explanations named a blocking head no longer waiting.)"""
    fail = cy.fail
    if q.blocked.get(qi) == head:
        del q.blocked[qi]
    if q.aged_heads.get(qi) == head:
        del q.aged_heads[qi]
    cy.holding_quota.pop(head, None)
    new_head = -1
    for w in q.cands:
        f = fail.get(w.id)
        if f is None or f[0] != F_POLICY or f[1] != head:
            continue
        if new_head >= 0:
            fail[w.id] = (F_POLICY, new_head)
            continue
        if lender.lend(w, qi, untried=True):
            continue
        c = cy.quota_fail(qi, w._request._d)
        if not w.preemptible and cy.np_short(w, qi):
            fail[w.id] = (F_NPMIN, qi)
        elif c >= 0:
            fail[w.id] = (F_QUOTA, c)
        else:
            fail[w.id] = (F_NODES, cy.shape(w))
        if q.blocks(w):
            q.blocked[qi] = w.id
            new_head = w.id

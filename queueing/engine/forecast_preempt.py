"""Preemption in the forward simulation's virtual time (:mod:`.forecast_sim`)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queueing.engine.aging import admitted_ahead, aged_before
from queueing.engine.cyclestate import order_key
from queueing.engine.forecast_arrivals import arrive, waiting_copy
from queueing.engine.preemption import awaited_by, search_key
from queueing.engine.reservations import beyond_victims
from queueing.engine.types import WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.forecast_sim import Simulation
    from queueing.engine.forecast_window import SimCand, SimQueue
    from queueing.engine.nodes import Placement, PodSetReq

__all__ = [
    "MAX_SIM_PREEMPTIONS",
    "MAX_SIM_VICTIMS",
    "Awaiting",
    "awaiting_at_start",
    "drop_awaiting",
    "preempt",
    "preempt_deferred",
    "rewatch",
    "victim_ended",
    "watch_reclaim",
    "within_min",
]

#: Victim searches one forward run may make (each looks at ``MAX_SIM_VICTIMS`` at most).
MAX_SIM_PREEMPTIONS = 256
MAX_SIM_VICTIMS = 64
#: Gang placements one victim search may try.
_SIM_PLACEMENTS = 4


def preempt(sim: Simulation, sq: SimQueue, c: SimCand, t: float, fail_c: int) -> bool:
    """Whether ``c`` gets in by preempting, as the cycle would (simplified).

    The cycle's rules, cheaply: in-quota victims of lower priority (its queue's
    ``preempt_within_quota``), and -- when its quota stays within its ``min`` --
    work of other quotas of the tree using more than their runtime quota
    (``reclaim``; of lower priority only under ``LowerPriority``), each taken only
    while its chain below the common ancestor still borrows and none of it goes
    below its ``min`` (:func:`_reclaimable`, the cycle's ``reclaim_ok``). Victims expected
    to end within ``preempt_grace_s`` are awaited, not evicted: when the victims found
    include such work, nothing is evicted and the preemptor waits first in line for
    what they free (the cycle's reservation). Work of its own quota
    from a queue of higher queue priority, or admitted by age ahead of the preemptor,
    is never taken in-quota (:func:`.aging.admitted_ahead`, with the start in virtual time of what the
    simulation started: without it gpu-heavy's speech gangs, admitted by age, were
    evicted in the forecast by fresher ones of higher priority that the cycle keeps
    waiting, and forecast up to 530 s early). A reclaim takes it all the same, as the
    cycle's does (its in-quota stream alone spares by age). A quota is within its
    ``min`` in the resources that min names (:func:`within_min`: gpu-heavy's mins name
    GPUs only, and a check of every resource requested let no gang there reclaim).
    Victims are taken lowest priority first, latest end first, until the quota chain
    fits and the gang places; those the preemptor can do without are dropped again
    (:func:`_add_back`, the cycle's add-back). The victims release at once and wait
    again in their queues (:func:`_requeue`, as the cycle requeues them); the
    preemptor starts a cycle after its queue's next victim search (one per queue and
    quota per cycle, as in the cycle). Not modelled: the cycle's ``FairShare``
    preemption between two borrowing quotas (30 of the 199 evictions in gpu-heavy's
    ten benchmark worlds; none in the demo's).
    """
    cy = sim.cy
    spec = sq.state.spec
    if not cy.config.preemption or not sq.state.may_preempt or sim.preempts_left <= 0:
        return False
    w = c.w
    qi = c.qi
    # The cycle's one victim search for its queue and quota (and kind of claim) may
    # have gone to another workload at this very instant (``Cycle.search_key``): an
    # eviction then waits for the next cycle's search (``next_search``, below), and an
    # await is not decided now (below).
    slot_taken = (
        t <= sim.now
        and search_key(
            sq.state.index,
            qi,
            within_min(sim.used[qi], sim.tree.mins[qi], w._request._d),
            w.queue_order_at <= sq.state.aged_before,
        )
        in cy.preempt_tried
    )
    shape = cy.shape(w)
    memo = (qi, w.priority, shape)
    if memo in sim.preempt_failed or (-1, w.priority, shape) in sim.preempt_failed:
        return False
    sim.preempts_left -= 1
    sim.preempt_failed.add(memo)  # cleared when capacity frees up (see run)
    tree = sim.tree
    req = c.req
    chain = tree.chains[qi]
    used = sim.used
    limit = sim.limit_base
    need: dict[int, dict[str, int]] = {}
    for node_q in chain:
        u = used[node_q]
        lim = limit[node_q]
        for k, amount in req.items():
            d = u.get(k, 0) + amount - lim.get(k, 0)
            if d > 0:
                need.setdefault(node_q, {})[k] = d
    if not need and sim.nodes.place(cy.reqs(w)) is not None:
        # Its quota fits by the split without aged claims and the nodes hold it as they
        # are: no victim helps, it waits for the claims to move (the cycle's rule:
        # aging takes back what siblings borrow as their work ends, it never evicts).
        # Without it a 1-GPU job of llm, short only of the runtime quota its sibling's
        # aged claim took, evicted another in the forecast and started at once (gpu-heavy
        # seed 20, gpu-1-127; the cycle kept it waiting).
        return False
    grace = cy.config.preempt_grace_s
    specs = cy.queue_specs
    w_aged = w.queue_order_at <= aged_before(spec, t)
    started = sim.started

    def spared(v: WorkloadSpec) -> bool:
        """Ahead of ``w`` by queue priority or admitted by age ahead of it
        (:func:`.aging.admitted_ahead`): the cycle never takes it for ``w`` in-quota."""
        return bool(admitted_ahead(specs.get(v.queue), spec, v, w, w_aged, started.get(v.id)))

    # Work due to end within the grace period is a victim like any other, but one the
    # preemptor awaits rather than evicts (below).
    # Work another preemptor awaits is not a victim (``Simulation.awaited``), unless
    # this one comes first in priority order: the cycle decides who awaits anew each
    # cycle, the first preemptor to search first.
    awaited = sim.awaited
    awaits = sim.awaits
    wid = w.id
    w_order = order_key(w)

    def free(vid: int) -> bool:
        by = awaited.get(vid, wid)
        return by == wid or w_order < awaits[by].order

    pool: list[tuple[int, float, int, int]] = []
    if spec.preempt_within_quota != "Never":
        for vid, (v, _, end) in sim.running.get(qi, {}).items():
            if v.priority < w.priority and not spared(v) and free(vid):
                pool.append((v.priority, -end, vid, qi))
    if (
        spec.reclaim != "Never"
        and (not need or any(x != qi for x in need))
        and within_min(used[qi], tree.mins[qi], req)
    ):
        lower = spec.reclaim == "LowerPriority"
        root = chain[-1]
        runtime = sim.runtime
        chain_set = set(chain)
        for vq, members in sim.running.items():
            if vq in chain_set or tree.chains[vq][-1] != root or not members:
                continue
            u = used[vq]
            rt = runtime[vq]
            if not any(u.get(k, 0) > rt.get(k, 0) for k in req):
                continue
            for vid, (v, _, end) in members.items():
                # Age spares work only from in-quota preemption, as in the cycle: a
                # reclaim takes back what the quota is guaranteed, aged or not.
                if (not lower or v.priority < w.priority) and free(vid):
                    pool.append((v.priority, -end, vid, vq))
    if not pool:
        return False
    pool = heapq.nsmallest(MAX_SIM_VICTIMS, pool)
    chains = tree.chains
    freed: dict[int, dict[str, int]] = {}
    extra: dict[int, dict[str, int]] = {}
    chosen: list[tuple[WorkloadSpec, int, dict[int, dict[str, int]]]] = []
    nindex = sim.nodes.index
    reqs = cy.reqs(w)
    tries = _SIM_PLACEMENTS
    placed = None
    quota_short = bool(need)
    # What victims of other quotas take from each quota of their chain below the
    # common ancestor, as the cycle counts it (``reclaim_ok`` in :mod:`.preemption`).
    taken: dict[int, dict[str, int]] = {}
    own_chain = set(chain)
    for _, _, vid, vq in pool:
        v, held, _ = sim.running[vq][vid]
        vreq = v._request._d
        below: list[int] = []
        if vq != qi:
            below = _reclaimable(sim, vq, vreq, req, own_chain, taken)
            if not below:
                continue  # its quota no longer borrows, or a min would break
        missing = [
            (node_q, k)
            for node_q in chains[vq]
            if node_q in need
            for k, d in need[node_q].items()
            if freed.get(node_q, {}).get(k, 0) < d
        ]
        if quota_short and not any(vreq.get(k, 0) > 0 for _, k in missing):
            continue  # it does not lower what is missing
        for x in below:
            tx = taken.setdefault(x, {})
            for k, amount in vreq.items():
                tx[k] = tx.get(k, 0) + amount
        for node_q in chains[vq]:
            if node_q in need:
                got = freed.setdefault(node_q, {})
                for k, x in vreq.items():
                    got[k] = got.get(k, 0) + x
        per_node = _on_nodes(nindex, v, held)
        chosen.append((v, vq, per_node))
        for ni, holds in per_node.items():
            acc = extra.setdefault(ni, {})
            for k, x in holds.items():
                acc[k] = acc.get(k, 0) + x
        quota_short = any(
            freed.get(node_q, {}).get(k, 0) < d
            for node_q, miss in need.items()
            for k, d in miss.items()
        )
        if quota_short:
            continue
        placed = sim.nodes.place(reqs, extra)
        if placed is not None:
            break
        tries -= 1
        if tries <= 0:
            return False
    if placed is None:
        return False
    if len(chosen) > 1:
        placed = _add_back(sim, chosen, need, chains, reqs, extra, placed)
    history = cy.snapshot.runtime_history
    if any(
        awaited_by(v, t, grace, history, sim.started.get(v.id)) is not None for v, _, _ in chosen
    ):
        # Some of the victims are due to end within the grace period (by their declared
        # runtime, as the cycle judges it, :func:`.preemption.awaited_by`): nothing is
        # evicted and the preemptor awaits them, first in line for what they free (the
        # cycle's reservation). Left to wait as any other, what they freed went to
        # work of another queue that came first in the round. What it needs beyond
        # what they free is held for it meanwhile, as the cycle reserves it
        # (``Simulation.holds``): work behind it does not take that room either.
        if slot_taken:
            # Not chosen by the cycle now, it waits for room as it is; awaiting here, a
            # medium of the demo held the room its victim freed from work the cycle
            # started in it (forecast 8 s late; the cycle's search kept going to the
            # workload ahead of it, and it started on room that freed).
            return False
        c.first = True
        _take_over(sim, wid, chosen)
        _hold_for(sim, w, qi, chosen, placed.per_node)
        return False
    # Evict: quota usage and node capacity come back now (their end events are void).
    _take_over(sim, wid, chosen)
    for v, vq, per_node in chosen:
        sim.evicted.add(v.id)
        del sim.running[vq][v.id]
        sim._release(vq, v, per_node, demand=True)
        _requeue(sim, v)
    sim.preempt_failed.discard(memo)
    sim._take(qi, w, req, placed.per_node)
    # The cycle at ``t`` (or, at the forecast's own instant, the next one) searches;
    # one search per queue and quota per cycle; the preemptor starts a cycle later.
    tick = sim.tick
    at = t if t > sim.now else sim.now + tick
    skey = (sq.index, qi)
    at = max(at, sim.next_search.get(skey, at))
    sim.next_search[skey] = at + tick
    start = at + tick
    sim.eta[w.id] = start
    sim._start(start, qi, w, dict(placed.per_node))
    return True


@dataclass(slots=True)
class Awaiting:
    """A waiting preemptor that awaits its victims, and what its hold is made from
    (:func:`.reservations.beyond_victims`): what the victims still running free per
    quota of its chain (``freed``) and per node (``extra``), and each of them
    (``victims``: id -> its request, quota index and room per node)."""

    #: The preemptor's priority order (:func:`.cyclestate.order_key`): one before it
    #: may take its victims over, as in the cycle, which decides anew each cycle.
    order: tuple[int, float, int]
    queue: str
    qi: int
    req: Mapping[str, int]
    per_node: Mapping[int, Mapping[str, int]]
    freed: dict[int, dict[str, int]]
    extra: dict[int, dict[str, int]]
    victims: dict[int, tuple[Mapping[str, int], int, Mapping[int, Mapping[str, int]]]]


def _on_nodes(
    nindex: Mapping[str, int], v: WorkloadSpec, held: dict[int, dict[str, int]] | None
) -> dict[int, dict[str, int]]:
    """What running ``v`` holds per node index: ``held`` when the simulation started
    it, else its assignment."""
    if held is not None:
        return held
    return {nindex[n]: dict(r.raw) for n, r in v.assignment.items() if n in nindex}


def _add(acc: dict[int, dict[str, int]], key: int, amounts: Mapping[str, int], sign: int) -> None:
    got = acc.setdefault(key, {})
    for k, x in amounts.items():
        got[k] = got.get(k, 0) + sign * x


def _hold_for(
    sim: Simulation,
    w: WorkloadSpec,
    qi: int,
    victims: list[tuple[WorkloadSpec, int, dict[int, dict[str, int]]]],
    per_node: Mapping[int, Mapping[str, int]],
) -> None:
    """Hold for ``w``, awaiting ``victims``, what it needs beyond what they free: per
    quota of its chain and per node (the cycle's ``CycleState.reserve``). No other
    preemptor takes them meanwhile, and the hold grows as they end (:func:`victim_ended`)."""
    chains = sim.tree.chains
    chain = set(chains[qi])
    a = Awaiting(order_key(w), w.queue, qi, w._request._d, per_node, {}, {}, {})
    for v, vq, on_nodes in victims:
        vreq = v._request._d
        for c in chains[vq]:
            if c in chain:
                _add(a.freed, c, vreq, 1)
        for ni, amount in on_nodes.items():
            _add(a.extra, ni, amount, 1)
        a.victims[v.id] = (vreq, vq, on_nodes)
        sim.awaited[v.id] = w.id
    sim.awaits[w.id] = a
    sim.holds[w.id] = beyond_victims(chains[qi], a.req, a.freed, per_node, a.extra)
    sim._hold(w.id)


def _take_over(
    sim: Simulation, wid: int, victims: list[tuple[WorkloadSpec, int, dict[int, dict[str, int]]]]
) -> None:
    """Preemptor ``wid`` takes ``victims``: those that awaited any of them await no
    more and hold nothing (in the cycle they search again, and compete)."""
    awaited = sim.awaited
    for v, _, _ in victims:
        by = awaited.get(v.id)
        if by is not None and by != wid:
            drop_awaiting(sim, by)


def drop_awaiting(sim: Simulation, wid: int) -> None:
    """``wid`` awaits nothing more (started, or its victims taken over): its hold is
    given back and the work it awaited is anyone's victim again."""
    a = sim.awaits.pop(wid, None)
    if a is not None:
        for vid in a.victims:
            sim.awaited.pop(vid, None)
    if wid in sim.held:
        sim._unhold(wid)
    sim.holds.pop(wid, None)


def awaiting_at_start(sim: Simulation) -> None:
    """The cycle's preemptors that await their victims (``CycleState.awaiting``), as
    :func:`_hold_for` records one made in virtual time: what their reservations were
    made from (``CycleState.reservations``), and the victims still running."""
    cy = sim.cy
    where: dict[int, tuple[int, WorkloadSpec, dict[int, dict[str, int]] | None]] = {}
    for vq, members in sim.running.items():
        for vid, (v, on_nodes, _) in members.items():
            where[vid] = (vq, v, on_nodes)
    nindex = sim.nodes.index
    specs = {w.id: w for sq in sim.queues for w in sq.ws if w.id in cy.awaiting}
    for wid, vids in cy.awaiting.items():
        basis = cy.reservations.get(wid)
        w = specs.get(wid)
        if wid not in sim.holds or basis is None or w is None:
            continue
        a = Awaiting(
            order_key(w),
            w.queue,
            basis.qi,
            basis.req,
            basis.per_node,
            {c: dict(x) for c, x in basis.freed.items()},
            {i: dict(x) for i, x in basis.node_extra.items()},
            {},
        )
        for vid in vids:
            got = where.get(vid)
            if got is None:
                continue  # gone already: what it freed is counted free
            vq, v, held = got
            a.victims[vid] = (v._request._d, vq, _on_nodes(nindex, v, held))
            sim.awaited[vid] = wid
        sim.awaits[wid] = a


def victim_ended(sim: Simulation, vid: int) -> None:
    """Awaited work ``vid`` ended in virtual time: what it freed joins its preemptor's
    hold (:func:`.reservations.beyond_victims` over the victims still running), as the
    cycle, at its next search, reserves all it needs beyond them. Before, that room
    was free for anyone at that instant, and work of another quota behind the
    preemptor could take it (the cycle keeps it for the preemptor)."""
    wid = sim.awaited.pop(vid)
    a = sim.awaits.get(wid)
    if a is None or wid not in sim.holds:
        return
    got = a.victims.pop(vid, None)
    if got is None:
        return
    vreq, vq, on_nodes = got
    chain = set(sim.tree.chains[a.qi])
    for q in sim.tree.chains[vq]:
        if q in chain:
            _add(a.freed, q, vreq, -1)
    for ni, amount in on_nodes.items():
        _add(a.extra, ni, amount, -1)
    held = wid in sim.held
    if held:
        sim._unhold(wid)
    sim.holds[wid] = beyond_victims(sim.tree.chains[a.qi], a.req, a.freed, a.per_node, a.extra)
    if held:
        sim._hold(wid)
    # Looked at again now, as the cycle searches again: filed, it waited to be woken
    # by room that frees, and the room its victim freed went into its own hold (where
    # its quota's headroom stayed below zero, nothing woke it).
    sq = sim.by_name.get(a.queue)
    if sq is not None:
        for c in sq.cands.values():
            if c.w.id == wid:
                if c.filed:
                    sim._mark(c)
                break


def preempt_deferred(sim: Simulation, t: float) -> None:
    """The preemptions the simulation's start deferred (``Simulation.defer_preempts``),
    now that the cycle's waiting preemptors have started: each candidate still filed
    tries again, by the quota of now (filed, it stays as it was if it cannot)."""
    deferred = sim.defer_preempts or []
    sim.defer_preempts = None
    for sq, c in deferred:
        if not c.filed or sq.cands.get(c.idx) is not c:
            continue  # woken, started or moved by age since
        fail_c, _ = sim._quota_fail(c.qi, c.req, w=c.w)
        if sim._preempt(sq, c, t, fail_c):
            c.filed = False
            sim._admitted(sq, c.idx, c.qi)
            sim._schedule(sq)


#: Ids of evicted work queued again in virtual time: negative, below any arrival's.
_REQUEUED_IDS = -(10**12)


def _requeue(sim: Simulation, v: WorkloadSpec) -> None:
    """An evicted workload waits again in its queue, in its old place (the cycle
    requeues it): it competes for the room it left, and runs its whole runtime again
    when it starts. A copy under an id of its own (its first start, if the simulation
    made it, stays its ETA), counted with the arrivals."""
    sim.requeued += 1
    arrive(sim, waiting_copy(v, _REQUEUED_IDS - sim.requeued, v.queue_order_at))


def _add_back(
    sim: Simulation,
    chosen: list[tuple[WorkloadSpec, int, dict[int, dict[str, int]]]],
    need: Mapping[int, Mapping[str, int]],
    chains: list[tuple[int, ...]],
    reqs: Sequence[PodSetReq],
    extra: dict[int, dict[str, int]],
    placed: Placement,
) -> Placement:
    """Drop from ``chosen`` (in place), last chosen first, every victim the preemptor
    can do without: its quota chain still fits and its pods still place without
    what that victim holds (the cycle's add-back; without it the simulation evicted a
    small job on the way to the gang that was enough, and gave its slot to the
    preemptor). At most ``_SIM_PLACEMENTS`` placements are tried. Returns the
    placement of the victims kept."""
    tries = _SIM_PLACEMENTS
    for item in list(reversed(chosen)):
        if tries <= 0:
            break
        v, vq, per_node = item
        vreq = v._request._d
        chain_v = set(chains[vq])
        others = [o for o in chosen if o is not item]
        short = False
        for node_q, miss in need.items():
            if node_q not in chain_v:
                continue
            for k, d in miss.items():
                if vreq.get(k, 0) and (
                    sum(o[0]._request._d.get(k, 0) for o in others if node_q in chains[o[1]]) < d
                ):
                    short = True
        if short:
            continue
        for ni, holds in per_node.items():
            acc = extra[ni]
            for k, x in holds.items():
                acc[k] -= x
        tries -= 1
        got = sim.nodes.place(reqs, extra)
        if got is not None:
            chosen.remove(item)
            placed = got
            continue
        for ni, holds in per_node.items():
            acc = extra[ni]
            for k, x in holds.items():
                acc[k] += x
    return placed


def within_min(used: Mapping[str, int], mins: Mapping[str, int], req: Mapping[str, int]) -> bool:
    """Whether a quota using ``used`` stays within its guarantee with ``req``: in every
    resource of ``req`` its min names, and it names one (the cycle's ``within_min``: a
    quota that guarantees GPUs but not cpu is not borrowing because it uses cpu)."""
    keys = [k for k in req if mins.get(k, 0) > 0]
    return bool(keys) and all(used.get(k, 0) + req[k] <= mins[k] for k in keys)


def _reclaimable(
    sim: Simulation,
    vq: int,
    vreq: Mapping[str, int],
    req: Mapping[str, int],
    own_chain: set[int],
    taken: dict[int, dict[str, int]],
) -> list[int]:
    """The quotas of victim quota ``vq``'s chain below the common ancestor with the
    preemptor (whose chain is ``own_chain``) when taking ``vreq`` from them is a
    reclaim the cycle makes: some of them uses more than its runtime quota of a
    resource the preemptor needs, net of what victims chosen before take
    (``taken``), and none goes below its ``min`` in such a resource. Empty otherwise.
    """
    tree = sim.tree
    used = sim.used
    runtime = sim.runtime
    below: list[int] = []
    borrowing = False
    for x in tree.chains[vq]:
        if x in own_chain:
            break  # the lowest common ancestor
        below.append(x)
        ux, tx, rx, mx = used[x], taken.get(x, {}), runtime[x], tree.mins[x]
        for k in req:
            a = ux.get(k, 0) - tx.get(k, 0)
            if a > rx.get(k, 0):
                borrowing = True
            t = vreq.get(k, 0)
            if t and a - t < mx.get(k, 0):
                return []
    return below if borrowing else []


def watch_reclaim(sim: Simulation, sq: SimQueue, c: SimCand) -> None:
    """Watch ``c``, which could neither start nor preempt, if it may reclaim once its
    quota is back within its min: it asks no more than that min (in the resources it
    names) and is not within it now (a reclaim needs it, see :func:`preempt`)."""
    if not sim.cy.config.preemption or not sq.state.may_preempt:
        return
    if sq.state.spec.reclaim == "Never":
        return
    mins = sim.tree.mins[c.qi]
    if within_min({}, mins, c.req) and not within_min(sim.used[c.qi], mins, c.req):
        sim.reclaim_watch.setdefault(c.qi, []).append(c)


def rewatch(sim: Simulation, fell: set[int]) -> None:
    """Look again at the watched candidates of the quotas whose usage fell and that
    are now within their min (the cycle tries them every cycle: once their own work
    ends, they take back what a borrowing sibling holds)."""
    watch = sim.reclaim_watch
    for qi in fell & watch.keys():
        keep = []
        for c in watch[qi]:
            sq = sim.queues[c.queue]
            if sq.cands.get(c.idx) is not c or c.w.id in sim.eta:
                continue  # started, or gone
            if within_min(sim.used[qi], sim.tree.mins[qi], c.req):
                sim._mark(c)
            else:
                keep.append(c)
        if keep:
            watch[qi] = keep
        else:
            del watch[qi]

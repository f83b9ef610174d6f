"""Why each waiting workload is still waiting.

Every workload left pending gets a structured :class:`~.types.Explanation`, built
from the cycle's end state (which is what the next cycle starts from):

* ``quota`` -- the first quota node on its chain whose runtime quota (or max, or the
  cluster's capacity at a root) is too small, with the shortfall per resource;
* ``nodes`` -- quota allows it but its pods do not all place at once; the largest
  free slot on one eligible node and how many nodes are eligible;
* ``preempting`` -- capacity is reserved for it while the workloads it waits for
  release it: victims being evicted (``limit="evicting"``), or work expected to end
  within preemption's grace period that it waits for instead of evicting
  (``limit="finishing"``); ``victims`` names them (``limit=None``: none is known);
* ``policy-blocked`` -- a Block/Intelligent head ahead of it on the same quota
  does not fit; ``depth`` -- beyond the queue's ``max_depth``;
* ``backoff``, ``never-fits``, ``unknown-queue``.

Each carries the first ``explain_ahead`` workloads ahead of it in its queue and the
unblock hints: ``to_free`` (capacity that must be released), ``victims`` (for a
preemptor, the victims chosen; for a quota-blocked workload whose queue preempts
within its quota, the first lower-priority workloads of its quota that preemption
could take) and ``borrowable`` (how much more its quota's max would let it borrow
than its runtime quota gives it now).

Explanations depend on the workload only through its quota, request shape and queue
position, so the expensive parts are cached per (quota node, request) and shared.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from queueing.engine.aging import admitted_ahead
from queueing.engine.bound import AgingBounds
from queueing.engine.cyclestate import (
    F_DEPTH,
    F_NEVER,
    F_NODES,
    F_NPMIN,
    F_POLICY,
    F_QUOTA,
    F_WAITING,
)
from queueing.engine.guarded import guarded_victims
from queueing.engine.nodes import PodSetReq
from queueing.engine.quota import Rooms
from queueing.engine.resources import EMPTY, Resources
from queueing.engine.types import (
    BOUND_CONDITION,
    EXPLAIN_BACKOFF,
    EXPLAIN_BEHIND,
    EXPLAIN_DEPTH,
    EXPLAIN_NEVER,
    EXPLAIN_NODES,
    EXPLAIN_POLICY,
    EXPLAIN_PREEMPTING,
    EXPLAIN_QUOTA,
    EXPLAIN_UNKNOWN,
    PREEMPTED,
    Explanation,
    WorkloadSpec,
    fmt,
    fmt_amount,
    fmt_time,
)
from queueing.engine.unusable import held_by_siblings

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle
    from queueing.engine.cyclestate import QueueState

__all__ = ["explain_all", "explainer", "node_bound_of"]


def _never_quota(cy: Cycle, qi: int, req: Mapping[str, int]) -> str | None:
    tree = cy.tree
    for c in tree.chains[qi]:
        mx = tree.maxes[c]
        for k, v in req.items():
            if k in mx and v > mx[k]:
                return (
                    f"it requests {fmt_amount(k, v)} but quota {tree.names[c]} has a max of "
                    f"{fmt_amount(k, mx[k])}"
                )
    cap = cy.nodes.capacity
    for k, v in req.items():
        if v > cap.get(k, 0):
            return (
                f"it requests {fmt_amount(k, v)} but the schedulable cluster has "
                f"{fmt_amount(k, cap.get(k, 0))}"
            )
    return None


def _never_lent(cy: Cycle, c: int, k: str, v: int, short: Resources) -> str:
    """Why a request of ``v`` of ``k`` never fits quota ``c``: siblings that lend
    nothing keep their min (``QuotaTree.ceiling``)."""
    tree = cy.tree
    p = tree.parent[c]
    keep = [
        (tree.names[s], tree.mins[s].get(k, 0))
        for s in tree.children[p]
        if s != c and not tree.allow_lent[s] and tree.mins[s].get(k, 0) > 0
    ]
    who = ", ".join(f"{name} ({fmt_amount(k, m)})" for name, m in keep[:3])
    if len(keep) > 3:
        who += f" and {len(keep) - 3} more"
    room = v - short.raw.get(k, 0)
    return (
        f"it requests {fmt_amount(k, v)} but quota {tree.names[c]} can get at most "
        f"{fmt_amount(k, room)}: within {tree.names[p]}, {who} keep their min and lend none of it"
    )


# The fields of an Explanation that differ between the waiting workloads sharing a
# template: workload_id (the first), ahead and waiting_ahead. A template is kept as
# the three runs of fields around them, so that each explanation is one tuple build;
# the hints of a quota explanation are set by position in that build.
_AHEAD = Explanation._fields.index("ahead")
_WAITING_AHEAD = Explanation._fields.index("waiting_ahead")
_VICTIMS = Explanation._fields.index("victims")
_VICTIM_NAMES = Explanation._fields.index("victim_names")
_VICTIMS_FREE = Explanation._fields.index("victims_free")
_NO_PREEMPT = Explanation._fields.index("no_preempt")
_STARTS_BY = Explanation._fields.index("starts_by")
_BOUND_BY = Explanation._fields.index("bound_by")
_BOUND_SINCE = Explanation._fields.index("bound_since")
_Parts = tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]


def _parts(t: Explanation) -> _Parts:
    return (
        tuple(t[1:_AHEAD]),
        tuple(t[_AHEAD + 1 : _WAITING_AHEAD]),
        tuple(t[_WAITING_AHEAD + 1 :]),
    )


def explain_all(cy: Cycle) -> dict[int, Explanation]:
    """Explanations for every waiting workload of the cycle, by workload id.

    Built at once, in the order :class:`.lazy_explanations.Explanations` iterates them."""
    explain_queue, explain_rest, _ = explainer(cy)
    out: dict[int, Explanation] = {}
    for q in cy.queues:
        explain_queue(q, out)
    explain_rest(out)
    return out


Part = Callable[["QueueState", dict[int, Explanation]], None]
Rest = Callable[[dict[int, Explanation]], None]
Bound = Callable[[], bool]


def node_bound_of(explanations: Mapping[int, Explanation]) -> bool:
    """Whether any of these explanations waits for room on the nodes rather than for
    quota: ``kind="nodes"``, or set aside at the cluster (``limit="cluster"``)."""
    return any(e.kind == EXPLAIN_NODES or e.limit == "cluster" for e in explanations.values())


def explainer(cy: Cycle) -> tuple[Part, Rest, Bound]:
    """The two builders of a cycle's explanations, sharing their caches, and a test.

    ``explain_queue(q, out)`` writes into ``out`` the explanation of every waiting
    workload of queue ``q``, in queue order; ``explain_rest(out)`` those of the
    workloads in no queue (set aside, backing off, unknown queue or quota). What one
    queue's explanations say depends on that queue alone (its order, its blocking
    heads) and on the cycle's end state, which the caches are pure functions of: the
    queues may be explained in any order, or some of them not at all.

    ``node_bound()``: :func:`node_bound_of` the explanations the two would build, found
    from the same caches without building them (a cycle that does not annotate asks
    only this: the explanations' hints, victims and names are not needed for it).
    """
    cfg = cy.config
    n_ahead = max(0, cfg.explain_ahead)
    fail_get = cy.fail.get
    admitted = cy.admitted_ids
    quota_of = cy.quota_of
    tree = cy.tree
    names = tree.names
    chains = tree.chains
    load = cy.load
    limit = cy.limit
    runtime = cy.runtime
    maxes = tree.maxes
    nodes = cy.nodes
    waiting = cy.waiting
    awaiting = cy.awaiting
    capacity = nodes.capacity

    # Templates (workload_id 0) and their parts, per (quota, request) and node shape.
    quota_cache: dict[tuple[int, Resources], tuple[Explanation, _Parts]] = {}
    nodes_cache: dict[object, tuple[Explanation, _Parts]] = {}
    # Per quota: per resource, the most a request may ask before _never_quota has a
    # reason (the tightest max on the chain, or the cluster's capacity).
    never_bound: dict[int, dict[str, int]] = {}
    # Per (quota, the request's resources): ``borrowable`` depends on nothing else.
    borrow_cache: dict[tuple[int, tuple[str, ...]], Resources] = {}

    # Workloads that ask more than their quota can get while its siblings' demand
    # holds their mins (``CycleState.unusable_ids``): why, per (quota, request).
    unusable_ids = cy.unusable_ids
    held_cache: dict[tuple[int, Resources], _Parts] = {}
    rooms = Rooms(tree, nodes.capacity, cy.demand)

    def quota_expl(qi: int, c: int, request: Resources) -> tuple[Explanation, _Parts]:
        key = (qi, request)
        got = quota_cache.get(key)
        if got is None:
            req = request.raw
            chain = chains[qi]
            # Report the highest quota node that is short: the leaf is often short only
            # because an ancestor's max or the cluster caps it.
            for x in chain:
                lx = load[x]
                limx = limit[x]
                for k, v in req.items():
                    if lx.get(k, 0) + v > limx.get(k, 0):
                        c = x
                        break
            bound = never_bound.get(qi)
            if bound is None:
                bound = never_bound[qi] = {}
            never = None
            for k, v in req.items():
                b = bound.get(k)
                if b is None:
                    b = capacity.get(k, 0)
                    for x in chain:
                        m = maxes[x].get(k)
                        if m is not None and m < b:
                            b = m
                    bound[k] = b
                if v > b:
                    never = _never_quota(cy, qi, req)
                    break
            if never is not None:
                tmpl = Explanation(0, EXPLAIN_NEVER, quota=names[c], limit="max", detail=never)
            else:
                lc = load[c]
                lim = limit[c]
                short = {
                    k: lc.get(k, 0) + v - lim.get(k, 0)
                    for k, v in req.items()
                    if lc.get(k, 0) + v > lim.get(k, 0)
                }
                kind_limit = "runtime"
                if short:
                    r = min(short)
                    mx = maxes[c].get(r)
                    rt = runtime[c].get(r, 0)
                    if mx is not None and mx <= rt:
                        kind_limit = "max"
                    elif tree.parent[c] < 0 and rt >= capacity.get(r, 0):
                        kind_limit = "cluster"
                bkey = (qi, tuple(req))
                borrowable = borrow_cache.get(bkey)
                if borrowable is None:
                    # Idle under every max on the chain (and at the root, in the
                    # cluster): what the quota could borrow if its runtime quota gave it.
                    borrow: dict[str, int] = {}
                    root = chain[-1]
                    for k in req:
                        idle = limit[root].get(k, 0) - load[root].get(k, 0)
                        for x in chain[:-1]:
                            m = maxes[x].get(k)
                            if m is not None and m - load[x].get(k, 0) < idle:
                                idle = m - load[x].get(k, 0)
                        if idle > 0:
                            borrow[k] = idle
                    borrowable = borrow_cache[bkey] = Resources.from_raw(borrow)
                shortfall = Resources.from_raw(short)
                tmpl = Explanation(
                    0,
                    EXPLAIN_QUOTA,
                    quota=names[c],
                    shortfall=shortfall,
                    limit=kind_limit,
                    to_free=shortfall,
                    borrowable=borrowable,
                )
            got = quota_cache[key] = (tmpl, _parts(tmpl))
        return got

    def nodes_expl(shape: object, wreqs: tuple[PodSetReq, ...]) -> tuple[Explanation, _Parts]:
        got = nodes_cache.get(shape)
        if got is None:
            never = nodes.never_fits(wreqs)
            if never is not None:
                tmpl = Explanation(0, EXPLAIN_NEVER, limit="nodes", detail=never)
            else:
                slot, n_elig = nodes.largest_slot(wreqs)
                biggest = max(wreqs, key=lambda p: (nodes._size(p), p.name))
                have = slot.raw if slot is not None else {}
                need = {k: v - have.get(k, 0) for k, v in biggest.req.items() if v > have.get(k, 0)}
                tmpl = Explanation(
                    0,
                    EXPLAIN_NODES,
                    largest_free_slot=slot,
                    eligible_nodes=n_elig,
                    to_free=Resources.from_raw(need),
                )
            got = nodes_cache[shape] = (tmpl, _parts(tmpl))
        return got

    new = tuple.__new__
    _policy = Explanation(0, EXPLAIN_POLICY)
    policy_pre = _parts(_policy)[0]
    policy_pre_aged = _parts(_policy._replace(limit="aged"))[0]
    # Per blocking head id: the parts after ``ahead`` (blocked_by .. detail) and after
    # ``waiting_ahead`` (blocked_by_name ..): its name, and what it waits for.
    blockers: dict[int, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
    behind_pre, behind_mid, behind_post = _parts(Explanation(0, EXPLAIN_BEHIND))
    depth_pre, depth_mid, depth_post = _parts(Explanation(0, EXPLAIN_DEPTH))

    victims_cache: dict[int, tuple[list[int], list[WorkloadSpec]]] = {}
    # ids, names, what they free of the short resources, the workloads, and whether
    # that covers the shortfall
    Hint = tuple[tuple[int, ...], tuple[str, ...], Resources, tuple[WorkloadSpec, ...], bool]
    hint_cache: dict[tuple[int, int, Resources], Hint | None] = {}
    # Never candidates of a search: chosen as victims, or awaited by another preemptor.
    skip_victims = set(cy.victim_ids)
    for vids in awaiting.values():
        skip_victims.update(vids)

    n_victims = max(1, n_ahead)

    def victims_hint(qi: int, priority: int, short: Resources) -> Hint | None:
        """Lower-priority workloads of the quota (victim order) as the victims fields.

        As many as free the shortfall, at most ``explain_ahead`` of them; with what
        they free of the short resources (which may be less than the shortfall).
        """
        cands = victims_cache.get(qi)
        if cands is None:
            # The first ``n_victims`` of the quota's possible victims in victim order,
            # lowest priority first: those below a priority are a prefix of it, and
            # only the first ``n_victims`` of them are ever looked at.
            order = [
                (v.priority, -(v.admitted_at or 0.0), -v.id, v)
                for v in cy.holding[qi]
                if v.phase != PREEMPTED and v.preemptible and v.id not in skip_victims
            ]
            order.sort()  # (ids are unique: the workloads themselves are never compared)
            top = order[:n_victims]
            cands = victims_cache[qi] = ([t[0] for t in top], [t[3] for t in top])
        n_lower = bisect_left(cands[0], priority)
        if not n_lower:
            return None
        hkey = (qi, priority, short)
        if hkey in hint_cache:
            return hint_cache[hkey]
        # (Plain loops over the raw dicts: a few thousand misses per cycle at 60k.)
        need = short.raw
        freed: dict[str, int] = {}
        chosen: list[WorkloadSpec] = []
        for v in cands[1][:n_lower]:
            if chosen:
                for k, x in need.items():
                    if freed.get(k, 0) < x:
                        break
                else:
                    break  # what is chosen frees the shortfall
            useful = False
            d = v._request._d
            for k in need:
                x = d.get(k, 0)
                if x:
                    freed[k] = freed.get(k, 0) + x
                    useful = True
            if useful:
                chosen.append(v)
        got: Hint | None = None
        if chosen:
            enough = True  # types.covers(freed, short)
            for k, x in need.items():
                if x > 0 and freed.get(k, 0) < x:
                    enough = False
                    break
            got = (
                tuple([v.id for v in chosen]),
                tuple([v.name for v in chosen]),
                Resources.from_raw(freed),
                tuple(chosen),
                enough,
            )
        hint_cache[hkey] = got
        return got

    preemption_on = cfg.preemption
    specs = cy.queue_specs
    failed = cy.preempt_failed
    tried = cy.preempt_tried

    def no_preempt(q: QueueState, w: WorkloadSpec, qi: int, hint: Hint) -> str:
        """Why the hint's victims were not preempted for ``w`` this cycle (a key of
        ``types.NO_PREEMPT``), or "" when that is not known (then no hint is offered:
        "preempting them would free it" alone reads as a promise the cycle broke)."""
        if not preemption_on:
            return "off"
        w_aged = w.queue_order_at <= q.aged_before
        spec = q.spec
        ahead = {admitted_ahead(specs.get(v.queue), spec, v, w, w_aged) for v in hint[3]}
        if "queue" in ahead:
            return "queue"
        if "aged" in ahead:
            return "aged"
        shape = cy.shape(w)
        if (qi, w.priority, shape) in failed or (-1, w.priority, shape) in failed:
            return "failed"
        if any((q.index, qi, kind) in tried for kind in (0, 1, 2)):
            return "turn"
        return ""

    guarded_cache: dict[tuple[int, int, int, Resources], Any] = {}

    def reclaim_on(q: QueueState) -> bool:
        return preemption_on and q.may_preempt and q.spec.reclaim != "Never"

    def guarded_hint(
        q: QueueState, w: WorkloadSpec, qi: int, tmpl: Explanation, fields: list[Any]
    ) -> None:
        """For a claim within its min short at an ancestor: the borrowed work that
        reclaim may not take, named with ``no_preempt="min"`` (:mod:`.guarded`)."""
        c = tree.index.get(tmpl.quota or "", qi)
        req = w._request._d
        if c == qi or not cy.within_min(qi, req):
            return
        lower_only = q.spec.reclaim == "LowerPriority"
        key = (qi, c, w.priority if lower_only else 0, tmpl.shortfall)
        got = guarded_cache.get(key, False)
        if got is False:
            got = guarded_cache[key] = guarded_victims(
                cy,
                qi,
                c,
                tmpl.shortfall.raw,
                req.keys(),
                w.priority,
                lower_only,
                skip_victims,
                n_victims,
            )
        if got is not None:
            vs, freed = got
            fields[_VICTIMS] = tuple(v.id for v in vs)
            fields[_VICTIM_NAMES] = tuple(v.name for v in vs)
            fields[_VICTIMS_FREE] = Resources.from_raw(freed)
            fields[_NO_PREEMPT] = "min"

    starts_by = AgingBounds(cy).of

    holding_names: dict[int, str] = {}

    def names_of(ids: tuple[int, ...]) -> tuple[str, ...]:
        if not holding_names:
            for ws in (*cy.holding, cy.orphans):
                for v in ws:
                    holding_names[v.id] = v.name
        return tuple(holding_names.get(i, "an unnamed workload") for i in ids)

    def head_summary(e: Explanation | None) -> str:
        """What the blocking head waits for, as a clause."""
        if e is None:
            return ""
        if e.kind == EXPLAIN_QUOTA and e.limit == "guarantees":
            text = f"it waits for quota {e.quota}: {e.detail}"
        elif e.kind == EXPLAIN_QUOTA:
            what = {"max": "max", "cluster": "share of the cluster"}.get(
                e.limit or "", "runtime quota"
            )
            text = f"it waits for quota {e.quota}: {what} short by {fmt(e.shortfall)}"
        elif e.kind == EXPLAIN_NODES:
            text = "it waits for room on nodes for all its pods at once"
        elif e.kind == EXPLAIN_PREEMPTING and e.limit == "finishing":
            text = "it waits for the workloads it would preempt to finish"
            if e.awaited_until is not None:
                text += f" (evicted if still running at {fmt_time(e.awaited_until)})"
        elif e.kind == EXPLAIN_PREEMPTING:
            text = "it waits for the workloads it preempted to release their capacity"
        else:
            return ""
        if e.starts_by is not None:
            text += f", and starts by {fmt_time(e.starts_by)} at the latest {BOUND_CONDITION}"
        return text

    shape_of = cy.shape

    def explain_queue(q: QueueState, out: dict[int, Explanation]) -> None:
        in_quota_preemption = q.spec.preempt_within_quota != "Never"
        aging = q.spec.aging_bound_s is not None
        aged_head = q.aged_heads.get
        idx = 0  # waiting ahead of the next one
        ahead: tuple[int, ...] = ()  # the first ``explain_ahead`` of them
        head_of: set[int] = set()  # quotas whose head in this queue was seen
        head_names: dict[int, str] = {}
        for w in q.cands:
            wid = w.id
            if wid in admitted:
                continue
            f = fail_get(wid)
            if f is not None and f[0] == F_NEVER:
                out[wid] = Explanation(wid, EXPLAIN_NEVER, limit="nodes", detail=str(f[1]))
                continue
            i = idx
            idx += 1
            cur = ahead
            if i < n_ahead:
                ahead = (*ahead, wid)
            qi = quota_of[wid]
            if qi in head_of:
                is_head = False
            else:
                is_head = True
                head_of.add(qi)
            if f is None:
                out[wid] = new(Explanation, (wid, *behind_pre, cur, *behind_mid, i, *behind_post))
                continue
            kind, arg = f
            if kind == F_POLICY:
                got = blockers.get(arg)
                if got is None:
                    parts = _parts(
                        Explanation(
                            0,
                            EXPLAIN_POLICY,
                            blocked_by=arg,
                            detail=head_summary(out.get(arg)),
                            blocked_by_name=head_names.get(arg, ""),
                        )
                    )
                    got = blockers[arg] = (parts[1], parts[2])
                # limit="aged": behind an aged head of a queue whose policy does not block
                pre = policy_pre_aged if aged_head(qi) == arg else policy_pre
                out[wid] = new(Explanation, (wid, *pre, cur, *got[0], i, *got[1]))
            elif kind == F_NODES:
                if arg is None:
                    # Fast-failed in the tournament (a single pod set that no node could
                    # hold): the shape was not recorded.
                    arg = shape_of(w)
                    tp = nodes_cache.get(arg)
                    if tp is None:
                        tp = nodes_expl(arg, cy.reqs(w))
                else:
                    tp = nodes_cache.get(arg)
                    if tp is None:
                        tp = nodes_expl(arg, cy.reqs(w))
                pre, mid, post = tp[1]
                e = new(Explanation, (wid, *pre, cur, *mid, i, *post))
                if is_head and aging and e.kind == EXPLAIN_NODES and q.holds(w, qi):
                    b = starts_by(q, w, qi)
                    if b is not None:
                        e = e._replace(starts_by=b[0], bound_by=b[1], bound_since=b[2])
                out[wid] = e
                head_names[wid] = w.name
            elif kind == F_QUOTA and wid in unusable_ids:
                key = (qi, w._request)
                hp = held_cache.get(key)
                if hp is None:
                    tmpl = held_by_siblings(cy, qi, w._request._d, rooms)
                    if tmpl.limit != "guarantees":
                        tmpl = quota_expl(qi, arg, w._request)[0]
                    hp = held_cache[key] = _parts(tmpl)
                pre, mid, post = hp
                out[wid] = new(Explanation, (wid, *pre, cur, *mid, i, *post))
                head_names[wid] = w.name
            elif kind == F_QUOTA:
                tmpl, (pre, mid, post) = quota_expl(qi, arg, w._request)
                fields = [wid, *pre, cur, *mid, i, *post]
                if tmpl.kind == EXPLAIN_QUOTA:
                    hint = (
                        victims_hint(qi, w.priority, tmpl.shortfall)
                        if in_quota_preemption
                        else None
                    )
                    if hint:
                        # hint[4]: its victims would free the shortfall
                        why = no_preempt(q, w, qi, hint) if hint[4] else ""
                        if why or not hint[4]:
                            fields[_VICTIMS] = hint[0]
                            fields[_VICTIM_NAMES] = hint[1]
                            fields[_VICTIMS_FREE] = hint[2]
                            fields[_NO_PREEMPT] = why
                    if not fields[_VICTIMS] and reclaim_on(q):
                        guarded_hint(q, w, qi, tmpl, fields)
                    if is_head and aging and q.holds(w, qi):
                        b = starts_by(q, w, qi)
                        if b is not None:
                            fields[_STARTS_BY], fields[_BOUND_BY], fields[_BOUND_SINCE] = b
                out[wid] = new(Explanation, fields)
                head_names[wid] = w.name
            elif kind == F_NPMIN:
                out[wid] = _np_expl(cy, w, arg)._replace(ahead=cur, waiting_ahead=i)
                head_names[wid] = w.name
            elif kind == F_DEPTH:
                out[wid] = new(Explanation, (wid, *depth_pre, cur, *depth_mid, i, *depth_post))
            elif kind == F_WAITING:
                # Its victims being evicted (in flight from earlier cycles or chosen in
                # this one); else the workloads finishing soon it waits for instead of
                # evicting them (preemption's grace); else none is known.
                vids = waiting.get(wid, ())
                how = "evicting"
                if not vids:
                    vids = awaiting.get(wid, ())
                    how = "finishing" if vids else ""
                out[wid] = Explanation(
                    wid,
                    EXPLAIN_PREEMPTING,
                    quota=w.quota,
                    limit=how or None,
                    ahead=cur,
                    victims=vids,
                    to_free=EMPTY,
                    waiting_ahead=i,
                    victim_names=names_of(vids),
                    awaited_until=cy.awaited_until.get(wid) if how == "finishing" else None,
                )
                head_names[wid] = w.name
            else:
                out[wid] = new(Explanation, (wid, *behind_pre, cur, *behind_mid, i, *behind_post))

    def explain_rest(out: dict[int, Explanation]) -> None:
        for w, c, lim, k, short in cy.never:
            v = w._request._d[k]
            if lim == "max":
                m = maxes[c][k]
                detail = (
                    f"it requests {fmt_amount(k, v)} but quota {names[c]} has a max of "
                    f"{fmt_amount(k, m)}"
                )
                to_free = EMPTY
            elif lim == "lent":
                detail = _never_lent(cy, c, k, v, short)
                to_free = EMPTY
            else:
                detail, to_free = _held_elsewhere(cy, k, v, short)
            out[w.id] = Explanation(
                w.id,
                EXPLAIN_NEVER,
                quota=names[c] if c >= 0 else None,
                shortfall=short,
                limit=lim,
                to_free=to_free,
                detail=detail,
            )
        for w in cy.backing_off:
            out[w.id] = Explanation(w.id, EXPLAIN_BACKOFF, requeue_at=w.requeue_at)
        for w, what in cy.unknown:
            out[w.id] = Explanation(w.id, EXPLAIN_UNKNOWN, detail=what)

    def node_bound() -> bool:
        # As explain_queue decides each one's kind and limit: only a nodes failure
        # whose shape fits some node (not never-fits) gives kind="nodes", and only a
        # quota failure whose template says limit="cluster" gives that limit; the
        # other failures' explanations are of kinds and limits neither (never-fits at
        # the nodes, policy, min, depth, preempting, behind).
        for q in cy.queues:
            for w in q.cands:
                wid = w.id
                if wid in admitted:
                    continue
                f = fail_get(wid)
                if f is None:
                    continue
                kind, arg = f
                if kind == F_NODES:
                    if arg is None:
                        arg = shape_of(w)
                    tp = nodes_cache.get(arg)
                    if tp is None:
                        tp = nodes_expl(arg, cy.reqs(w))
                    if tp[0].kind == EXPLAIN_NODES:
                        return True
                elif (
                    kind == F_QUOTA
                    and quota_expl(quota_of[wid], arg, w._request)[0].limit == "cluster"
                ):
                    return True
        # The workloads in no queue: set aside (their own limit), backing off, unknown.
        return any(lim == "cluster" for _w, _c, lim, _k, _s in cy.never)

    return explain_queue, explain_rest, node_bound


def _held_elsewhere(cy: Cycle, k: str, v: int, short: Resources) -> tuple[str, Resources]:
    """The detail of a workload set aside at the cluster (``limit="cluster"``), and what
    must be released for it (``to_free``).

    A tree's cycle counts as free only what the schedulable nodes have left beside what
    other quota trees hold (``NodeSpec.held_elsewhere``) and pods the queue does not
    manage. When the request fits what other trees' work would leave once it ends, it
    is not beyond the cluster: it waits for that room (``to_free`` = the shortfall).
    Beyond that it can never fit (``to_free`` empty)."""
    alloc = elsewhere = 0
    for spec in cy.nodes.specs:
        if not spec.unschedulable:
            alloc += spec.allocatable._d.get(k, 0)
            elsewhere += spec.held_elsewhere._d.get(k, 0)
    free = cy.nodes.capacity.get(k, 0)
    others = max(0, alloc - free - elsewhere)  # pods the queue does not manage
    unmanaged = f", {fmt_amount(k, others)} of it held by pods the queue does not manage"
    if v > free + elsewhere:
        return (
            f"it requests {fmt_amount(k, v)} but the schedulable cluster has "
            f"{fmt_amount(k, alloc)}" + (unmanaged if others else ""),
            EMPTY,
        )
    return (
        f"it requests {fmt_amount(k, v)}; other quota trees hold {fmt_amount(k, elsewhere)} "
        f"of the schedulable nodes' {fmt_amount(k, alloc)}"
        + (f" (and pods the queue does not manage {fmt_amount(k, others)})" if others else "")
        + f", leaving {fmt_amount(k, free)}: it fits once they release {fmt(short)}",
        short,
    )


def _np_expl(cy: Cycle, w: WorkloadSpec, qi: int) -> Explanation:
    """A non-preemptible ``w`` beyond quota ``qi``'s min (koord-queue's rule)."""
    tree = cy.tree
    name = tree.names[qi]
    mins = tree.mins[qi]
    held = cy.np_used[qi]
    req = w._request._d
    short = {
        k: held.get(k, 0) + v - mins[k]
        for k, v in req.items()
        if k in mins and held.get(k, 0) + v > mins[k]
    }
    # In the resources the min bounds (the others are left to the ordinary fit).
    bound = [k for k in req if k in mins]
    detail = (
        f"non-preemptible: needs {fmt({k: req[k] for k in bound})} within min "
        f"{fmt({k: mins[k] for k in bound})} of quota {name}, {name}'s non-preemptible "
        f"work holds {fmt({k: held[k] for k in bound if held.get(k)})}"
    )
    return Explanation(
        w.id,
        EXPLAIN_QUOTA,
        quota=name,
        shortfall=Resources.from_raw(short),
        limit="min",
        detail=detail,
    )

"""Why each waiting workload is still waiting.

Every workload left pending gets a structured :class:`~.types.Explanation`, built
from the cycle's end state (which is what the next cycle starts from):

* ``quota`` -- the first quota node on its chain whose runtime quota (or max, or the
  cluster's capacity at a root) is too small, with the shortfall per resource;
* ``nodes`` -- quota allows it but its pods do not all place at once; the largest
  free slot on one eligible node and how many nodes are eligible;
* ``preempting`` -- victims are releasing capacity reserved for it;
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

from collections.abc import Mapping
from typing import TYPE_CHECKING

from queueing.engine.cyclestate import (
    F_DEPTH,
    F_NODES,
    F_POLICY,
    F_QUOTA,
    F_WAITING,
)
from queueing.engine.nodes import PodSetReq, elig_key, podset_reqs
from queueing.engine.resources import EMPTY, Resources
from queueing.engine.types import (
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
)

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["explain_all"]


def _never_quota(cy: Cycle, qi: int, req: Mapping[str, int]) -> str | None:
    tree = cy.tree
    for c in tree.chains[qi]:
        mx = tree.maxes[c]
        for k, v in req.items():
            if k in mx and v > mx[k]:
                return f"it requests {v} {k} but quota {tree.names[c]} has a max of {mx[k]}"
    cap = cy.nodes.capacity
    for k, v in req.items():
        if v > cap.get(k, 0):
            return f"it requests {v} {k} but the schedulable cluster has {cap.get(k, 0)}"
    return None


def explain_all(cy: Cycle) -> dict[int, Explanation]:
    """Explanations for every waiting workload of the cycle, by workload id."""
    cfg = cy.config
    n_ahead = max(0, cfg.explain_ahead)
    out: dict[int, Explanation] = {}
    fail = cy.fail
    admitted = cy.admitted_ids
    tree = cy.tree
    names = tree.names
    load = cy.load
    limit = cy.limit
    runtime = cy.runtime
    maxes = tree.maxes
    nodes = cy.nodes
    waiting = cy.waiting
    capacity = nodes.capacity

    quota_cache: dict[tuple[int, Resources], Explanation] = {}
    nodes_cache: dict[object, Explanation] = {}

    def quota_expl(qi: int, c: int, request: Resources) -> Explanation:
        key = (qi, request)
        tmpl = quota_cache.get(key)
        if tmpl is None:
            req = request.raw
            # Report the highest quota node that is short: the leaf is often short only
            # because an ancestor's max or the cluster caps it.
            for x in tree.chains[qi]:
                lx = load[x]
                limx = limit[x]
                if any(lx.get(k, 0) + v > limx.get(k, 0) for k, v in req.items()):
                    c = x
            never = _never_quota(cy, qi, req)
            if never is not None:
                tmpl = Explanation(0, EXPLAIN_NEVER, quota=names[c], detail=never)
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
                borrow: dict[str, int] = {}
                rt_leaf = runtime[qi]
                for k in req:
                    ceiling = runtime[tree.chains[qi][-1]].get(k, 0)
                    for x in tree.chains[qi]:
                        m = maxes[x].get(k)
                        if m is not None and m < ceiling:
                            ceiling = m
                    b = ceiling - rt_leaf.get(k, 0)
                    if b > 0:
                        borrow[k] = b
                shortfall = Resources.from_raw(short)
                tmpl = Explanation(
                    0,
                    EXPLAIN_QUOTA,
                    quota=names[c],
                    shortfall=shortfall,
                    limit=kind_limit,
                    to_free=shortfall,
                    borrowable=Resources.from_raw(borrow),
                )
            quota_cache[key] = tmpl
        return tmpl

    def nodes_expl(shape: object, wreqs: tuple[PodSetReq, ...]) -> Explanation:
        tmpl = nodes_cache.get(shape)
        if tmpl is None:
            never = nodes.never_fits(wreqs)
            if never is not None:
                tmpl = Explanation(0, EXPLAIN_NEVER, detail=never)
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
            nodes_cache[shape] = tmpl
        return tmpl

    new = tuple.__new__
    _policy = Explanation(0, EXPLAIN_POLICY)
    policy_mid = tuple(_policy[2:7])  # quota .. eligible_nodes
    policy_tail = tuple(_policy[9:])  # to_free .. detail

    def with_id(tmpl: Explanation, wid: int, ahead: tuple[int, ...]) -> Explanation:
        # Fields 0 (workload_id) and 7 (ahead) differ; the rest comes from the template.
        return new(Explanation, (wid, *tmpl[1:7], ahead, *tmpl[8:]))

    victims_cache: dict[tuple[int, int], tuple[int, ...]] = {}
    skip_victims = cy.victim_ids

    def victims_hint(qi: int, priority: int) -> tuple[int, ...]:
        """Up to ``explain_ahead`` lower-priority workloads of the quota (victim order)."""
        key = (qi, priority)
        got = victims_cache.get(key)
        if got is None:
            lower = [
                v
                for v in cy.holding[qi]
                if v.priority < priority and v.phase != PREEMPTED and v.id not in skip_victims
            ]
            lower.sort(key=lambda v: (v.priority, -(v.admitted_at or 0.0), -v.id))
            got = victims_cache[key] = tuple(v.id for v in lower[: max(1, n_ahead)])
        return got

    for q in cy.queues:
        in_quota_preemption = q.spec.preempt_within_quota != "Never"
        waiting_ids: list[int] = []
        head: tuple[int, ...] = ()
        for w in q.cands:
            wid = w.id
            if wid in admitted:
                continue
            idx = len(waiting_ids)
            waiting_ids.append(wid)
            if idx <= n_ahead:
                head = tuple(waiting_ids[:n_ahead])
            ahead = head[:idx] if idx < n_ahead else head
            f = fail.get(wid)
            if f is None:
                out[wid] = Explanation(wid, EXPLAIN_BEHIND, ahead=ahead)
                continue
            kind, arg = f
            if kind == F_QUOTA:
                qi = cy.quota_of[wid]
                e = with_id(quota_expl(qi, arg, w._request), wid, ahead)
                if in_quota_preemption and e.kind == EXPLAIN_QUOTA:
                    hint = victims_hint(qi, w.priority)
                    if hint:
                        e = new(Explanation, (*e[:10], hint, *e[11:]))  # 10 = victims
                out[wid] = e
            elif kind == F_NODES:
                if arg is None:
                    # Fast-failed in the tournament (a single pod set that no node could
                    # hold): key the explanation without building the placer's view.
                    ps = w.pod_sets[0]
                    key: object = (elig_key(ps), frozenset(ps.requests._d.items()), ps.count)
                    tmpl = nodes_cache.get(key)
                    if tmpl is None:
                        tmpl = nodes_expl(key, podset_reqs(w.pod_sets))
                else:
                    tmpl = nodes_expl(arg, cy.reqs(w))
                out[wid] = with_id(tmpl, wid, ahead)
            elif kind == F_POLICY:
                out[wid] = new(
                    Explanation, (wid, EXPLAIN_POLICY, *policy_mid, ahead, arg, *policy_tail)
                )
            elif kind == F_DEPTH:
                out[wid] = Explanation(wid, EXPLAIN_DEPTH, ahead=ahead)
            elif kind == F_WAITING:
                out[wid] = Explanation(
                    wid,
                    EXPLAIN_PREEMPTING,
                    quota=w.quota,
                    ahead=ahead,
                    victims=waiting.get(wid, ()),
                    to_free=EMPTY,
                )
            else:
                out[wid] = Explanation(wid, EXPLAIN_BEHIND, ahead=ahead)
    for w in cy.backing_off:
        out[w.id] = Explanation(w.id, EXPLAIN_BACKOFF, requeue_at=w.requeue_at)
    for w, what in cy.unknown:
        out[w.id] = Explanation(w.id, EXPLAIN_UNKNOWN, detail=what)
    return out

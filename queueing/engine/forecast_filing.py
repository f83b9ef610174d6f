"""Filing in the forward simulation (:mod:`.forecast_sim`): a candidate that cannot
start waits for what blocks it to change.

To stay cheap, the simulation starts from what the cycle learnt: a candidate that
failed on nodes, or whose quota is still short, is *filed* under what blocks it and
looked at again only when that changes -- per (quota node, resource) in a heap
ordered by the amount it needs (woken when headroom reaches it), or per (eligible
node set, resource) ordered by its per-pod need (woken when a node there frees
enough). A release wakes only about as many filed candidates as the freed room could
hold, smallest need first -- an approximation: in a cluster full of small work a
large, high-ranked candidate may be woken later than the real cycle would consider
it.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queueing.engine.forecast_sim import Simulation
    from queueing.engine.forecast_window import SimCand

__all__ = ["file_cand", "wake_nodes", "wake_quota"]


def file_cand(sim: Simulation, c: SimCand, fail_c: int, fail_k: str) -> None:
    """File ``c`` under what blocks it: resource ``fail_k`` of quota node ``fail_c``,
    or (``fail_c`` < 0) the nodes its largest pod set may use, by that pod set's
    scarcest resource (``NodeIndex.primary``). A candidate that asks for nothing is
    filed under nothing."""
    # Filing twice is harmless: a stale entry only wakes a candidate for a recheck.
    c.filed = True
    sim.seq += 1
    # A waiting preemptor holding the cycle's reservation (``Simulation.holds``) needs
    # less than it asks, its own held room counted as used: it is woken by any room
    # that frees (there are few of them).
    own = c.w.id in sim.held
    if fail_c >= 0:
        heapq.heappush(
            sim.quota_files.setdefault((fail_c, fail_k), []),
            (0 if own else c.req.get(fail_k, 0), c.w.id, sim.seq, c),
        )
        return
    shape = sim.cy.shape(c.w)
    how = sim.node_how.get(shape)
    if how is None:
        reqs = sim.cy.reqs(c.w)
        ps = max(reqs, key=lambda p: (sim.nodes._size(p), p.name)) if reqs else None
        prim = sim.nodes.primary(ps.elig, ps.req) if ps is not None else None
        how = sim.node_how[shape] = (
            None if ps is None or prim is None else ((ps.elig, prim), ps.req.get(prim, 0))
        )
    if how is None:
        return
    key, need = how
    if own:
        need = 0
    lst = sim.node_files.get(key)
    if lst is None:
        lst = sim.node_files[key] = []
        for n in sim.nodes.eligible(key[0]):
            sim.node_keys.setdefault(n, []).append(key)
    heapq.heappush(lst, (need, c.w.id, sim.seq, c))


def wake_quota(sim: Simulation, touched: set[tuple[int, str]]) -> None:
    """Wake what is filed under the (quota node, resource) keys in ``touched``, by
    the headroom each now has under its limit."""
    files = sim.quota_files
    used = sim.used
    limit = sim.limit
    for key in touched:
        lst = files.get(key)
        if not lst:
            continue
        c_node, k = key
        head = limit[c_node].get(k, 0) - used[c_node].get(k, 0)
        _wake(sim, lst, head)


def wake_nodes(sim: Simulation, touched: set[int]) -> None:
    """Wake what is filed under the node sets of the nodes in ``touched``, by what
    each of those nodes now has free."""
    if not touched or not sim.node_files:
        return
    free = sim.nodes.free
    for n in touched:
        for key in sim.node_keys.get(n, ()):
            lst = sim.node_files.get(key)
            if not lst:
                continue
            _wake(sim, lst, free[n].get(key[1], 0))


def _wake(sim: Simulation, lst: list[tuple[int, int, int, SimCand]], room: int) -> None:
    """Wake filed candidates whose need fits ``room``, smallest need first.

    Only about as many as ``room`` could hold (twice over) are woken: waking every
    small candidate of a full cluster for each freed slot would make one simulated
    instant as costly as a whole cycle. The rest stay filed for the next release.
    """
    budget = 2 * room
    woken = 0
    while lst and lst[0][0] <= room:
        need = lst[0][0]
        if woken and need > budget:
            break
        cand = heapq.heappop(lst)[3]
        if cand.filed:
            sim._mark(cand)
            woken += 1
            budget -= max(need, 1)

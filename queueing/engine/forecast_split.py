"""When the forward simulation (:mod:`.forecast_sim`) splits the runtime quota again,
and how: the split of its state as the cycle would make it (:func:`requota`), and the
tests that say a recomputation may let something start -- a quota's demand fell below
its share (:func:`unused_share`, :func:`surplus_helps`), or demand that could not use
its share can now (:func:`any_usable`); and, between splits, the fair-share order of a
quota whose demand fell below its share (:func:`keep_shares`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING

from queueing.engine.forecast_aging import claims_at
from queueing.engine.unusable import still_unusable

if TYPE_CHECKING:
    from queueing.engine.forecast_sim import Simulation

__all__ = ["any_usable", "keep_shares", "limits", "requota", "surplus_helps", "unused_share"]


def requota(sim: Simulation, t: float) -> None:
    """Runtime quota (and fair share) for the simulation's state at ``t``.

    As the cycle splits it: without aged claims (``limit_base``, what a waiting
    preemptor is judged by) and, where some claim is not met by water-filling
    alone, again with the claims (``limit``).
    """
    tree = sim.tree
    cap = sim.nodes.capacity
    unusable = _unusable(sim, cap)
    sim.runtime, _ = tree.runtime(sim.own_demand, cap, unusable=unusable)
    sim.limit = sim.limit_base = limits(sim)
    if sim.claims_mode:
        claims = claims_at(sim, t)
        base = sim.runtime
        if claims is not None and any(
            v > base[i].get(k, 0) for i, c in enumerate(claims) for k, v in c.items()
        ):
            # Some claim is not met by water-filling alone: split again with them.
            sim.runtime, _ = tree.runtime(sim.own_demand, cap, claims, unusable=unusable)
            sim.limit = limits(sim)
    sim.fair = sim._fair()


def unused_share(sim: Simulation, ended: set[tuple[int, str]]) -> dict[tuple[int, str], int]:
    """Per (quota, resource) whose demand fell, the runtime quota it no longer
    uses and does not keep: above its demand, beyond a min it holds whatever its
    demand (a quota that does not lend it). A quota with workloads of its own and
    quotas below counts its whole runtime quota (its demand is theirs too: an
    over-estimate, which costs only a recomputation)."""
    tree = sim.tree
    out: dict[tuple[int, str], int] = {}
    for qi, k in ended:
        r = sim.runtime[qi].get(k, 0)
        if tree.children[qi]:
            out[qi, k] = r
            continue
        held = sim.own_demand[qi].get(k, 0)
        if not tree.allow_lent[qi]:
            held = max(held, tree.mins[qi].get(k, 0))
        if r > held:
            out[qi, k] = r - held
    return out


def keep_shares(sim: Simulation, surplus: Mapping[tuple[int, str], int]) -> None:
    """Between splits, rank each quota whose demand fell below its share (``surplus``,
    from :func:`unused_share`) by what it still keeps, as the cycle's fresh split ranks
    it (``FairShare.shrink``); its share for fitting stays until the next split.

    With the share it had, the demo's nlp-research scored 0.28 against the cycle's 0.50
    and went first on freed nodes in the forecast, second in the cycle (told every
    runtime and arrival, demo seed 8 erred 0.067, now 0.020). Splitting again at every
    end was as faithful (0.018) but left the 60k world's forecast 118 of the 750 ETAs
    a 1-s budget reached. A quota with quotas below counts its whole runtime quota as
    surplus (:func:`unused_share`): not ranked by it.
    """
    children = sim.tree.children
    runtime = sim.runtime
    shrink = sim.fair.shrink
    for (qi, k), v in surplus.items():
        if not children[qi]:
            shrink(qi, k, runtime[qi].get(k, 0) - v)


def surplus_helps(sim: Simulation, surplus: Mapping[tuple[int, str], int]) -> bool:
    """Whether the demand that fell below its runtime quota (``surplus``, per
    ending quota and resource) may let a candidate filed under a quota's room start.

    The split hands a quota's unused share to the other quotas of its tree, at most
    what fell: only a candidate filed under another quota of that tree (not one
    above the ending work, whose room grew with the release itself), for that
    resource, whose need fits its quota's headroom plus that much, may start on it.
    Recomputing whenever anything waited for quota did so at almost every end (a
    quota with nothing waiting has a runtime quota equal to its demand), which took
    the live forecast's budget from its draws.
    """
    tree = sim.tree
    for (c, k), lst in sim.quota_files.items():
        while lst and not lst[0][3].filed:
            heapq.heappop(lst)  # stale: woken or started since (as _wake drops it)
        if not lst:
            continue
        head = sim.limit[c].get(k, 0) - sim.used[c].get(k, 0)
        if lst[0][0] <= head:
            continue  # it fits already: the next release there wakes it
        gain = 0
        for (qi, rk), v in surplus.items():
            if rk == k and c not in tree.chains[qi] and tree.root_of(c) == tree.root_of(qi):
                gain += v
        if gain and lst[0][0] <= head + gain:
            return True
    return False


def any_usable(sim: Simulation) -> bool:
    """Whether one of the unusable workloads still waiting fits what its quota can
    get now."""
    live = [(qi, w) for qi, w in sim.unusable_ws if w.id not in sim.eta]
    still = still_unusable(sim.tree, sim.nodes.capacity, sim.own_demand, live, sim.eta)
    return len(still) < len(live)


def _unusable(sim: Simulation, cap: Mapping[str, int]) -> dict[int, dict[str, int]] | None:
    """Per quota, the requests of the cycle's unusable workloads that still ask more
    than their quota can get now (as ``CycleState.unusable_demand``), and of the work
    behind those that block their queue. In virtual time demand falls as work ends
    (only evicted victims come back), so one that fits is not looked at again."""
    if not sim.unusable_ws:
        return None
    sim.unusable_ws = still_unusable(sim.tree, cap, sim.own_demand, sim.unusable_ws, sim.eta)
    out: dict[int, dict[str, int]] = {}
    for qi, w in sim.unusable_ws:
        d = out.setdefault(qi, {})
        for k, v in w._request._d.items():
            d[k] = d.get(k, 0) + v
        behind = sim.unusable_behind.get(w.id)
        if behind is not None:
            # (Less what has started behind it meanwhile: nothing can.)
            for k, v in behind[1].items():
                d[k] = d.get(k, 0) + v
    return out or None


def limits(sim: Simulation) -> list[dict[str, int]]:
    maxes = sim.tree.maxes
    limit = []
    for i, rt in enumerate(sim.runtime):
        lim = dict(rt)
        for k, cap in maxes[i].items():
            if lim.get(k, 0) > cap:
                lim[k] = cap
        limit.append(lim)
    return limit

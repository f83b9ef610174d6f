"""Work that cannot start while its quota's siblings keep their mins (issue 11, item 6).

A workload asking more than its quota can get *now* -- at some level of its chain its
siblings keep their ``min`` for their own demand (:class:`.quota.Rooms`) -- keeps its
quota's min but takes no share of the weights, and neither does the work behind it when
it heads a strict-order queue: the share would sit idle while a sibling's work that can
use it waits (the liveness scan, seed 1293). This module finds that work for the cycle
(:func:`unusable_demand`, :func:`blocked_behind`), says why it waits
(:func:`held_by_siblings`), and tells the forward simulation which of it still cannot
start (:func:`still_unusable`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from queueing.engine.explanation import Explanation
from queueing.engine.quota import QuotaTree, Rooms
from queueing.engine.resources import Resources
from queueing.engine.types import EXPLAIN_QUOTA, WorkloadSpec, fmt_amount

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle
    from queueing.engine.cyclestate import QueueState

__all__ = ["blocked_behind", "held_by_siblings", "still_unusable", "unusable_demand"]


def unusable_demand(
    tree: QuotaTree,
    own_demand: Sequence[Mapping[str, int]],
    own_pend: Sequence[Mapping[str, int]],
    ceilings: Sequence[Mapping[str, int] | None],
    capacity: Mapping[str, int],
    in_quota: Sequence[Sequence[WorkloadSpec]],
) -> tuple[dict[int, dict[str, int]] | None, list[tuple[int, WorkloadSpec]]]:
    """Per quota, the summed requests of its competing workloads that ask more than
    it can get now (``quota.Rooms``: its siblings keep their mins for their present
    demand), and those workloads with their quota's index; ``in_quota[i]``: quota ``i``'s competing
    workloads. Only a quota whose room now is below its ceiling (what it could ever
    get; ``ceilings[i]``, computed for every quota with competing work) and below its
    demand can have any: only its workloads are looked at (at 60k pending, those of
    522 of 1,000 quotas; 892 workloads found).
    """
    full = tree.demand(own_demand)
    rooms = Rooms(tree, capacity, full)
    tight: dict[int, dict[str, int]] = {}
    for qi, pend in enumerate(own_pend):
        cc = ceilings[qi]
        if not pend or cc is None:
            continue
        now = rooms.of(qi)
        # A request passes the room only where the sum of the waiting ones does.
        t = {
            k: now.get(k, 0)
            for k, v in cc.items()
            if now.get(k, 0) < v and pend.get(k, 0) > now.get(k, 0)
        }
        if t:
            tight[qi] = t
    if not tight:
        return None, []
    out: dict[int, dict[str, int]] = {}
    pairs: list[tuple[int, WorkloadSpec]] = []
    for qi, room in tight.items():
        if len(room) == 1:
            ((k1, v1),) = room.items()
            found = [w for w in in_quota[qi] if w._request._d.get(k1, 0) > v1]
        else:
            found = [
                w for w in in_quota[qi] if any(w._request._d.get(k, 0) > v for k, v in room.items())
            ]
        if not found:
            continue
        d = out[qi] = {}
        for w in found:
            for k, v in w._request._d.items():
                d[k] = d.get(k, 0) + v
            pairs.append((qi, w))
    return out or None, pairs


def blocked_behind(
    queues: Sequence[QueueState],
    quota_of: Mapping[int, int],
    unusable: AbstractSet[int],
    in_queues: AbstractSet[str],
) -> dict[int, tuple[int, dict[str, int]]]:
    """Per unusable workload that blocks its quota in its queue (it fails first there:
    a strict-order head), its quota and the summed requests of the work of that quota
    behind it in that queue. Only the queues that hold such a workload (``in_queues``)
    are read."""
    out: dict[int, tuple[int, dict[str, int]]] = {}
    for q in queues:
        if not (q.block_all or q.intelligent) or q.spec.name not in in_queues:
            continue
        cands = q.cands
        seen: set[int] = set()
        held: dict[int, dict[str, int]] = {}  # quota -> behind its blocking head
        for w in cands:
            qi = quota_of.get(w.id)
            if qi is None:
                continue
            d = held.get(qi)
            if d is not None:
                if w.id not in unusable:  # (those are counted already)
                    for k, v in w._request._d.items():
                        d[k] = d.get(k, 0) + v
                continue
            if qi in seen:
                continue
            seen.add(qi)
            if w.id in unusable and q.blocks(w):
                held[qi] = d = {}
                out[w.id] = (qi, d)
    return {wid: got for wid, got in out.items() if got[1]}


def held_by_siblings(cy: Cycle, qi: int, req: Mapping[str, int], rooms: Rooms) -> Explanation:
    """Why a workload of quota ``qi`` asking ``req`` cannot start while its siblings'
    demand lasts (``CycleState.unusable_ids``): at the lowest level of its chain where
    its request passes what the quota can get now (:class:`.quota.Rooms`), the siblings
    that keep their min for their own demand, named with what they keep."""
    tree = cy.tree
    demand = cy.demand
    for c in tree.chains[qi]:
        p = tree.parent[c]
        if p < 0:
            break
        room = rooms.of(c)
        above = rooms.of(p)
        short = {
            k: v - room.get(k, 0)
            for k, v in req.items()
            if v > room.get(k, 0) and room.get(k, 0) < above.get(k, 0)
        }
        if not short:
            continue
        k = min(short)
        keep = []
        for s in tree.children[p]:
            b = tree._base(s, k, demand[s].get(k, 0)) if s != c else 0
            if b > 0:
                keep.append(f"{tree.names[s]} ({fmt_amount(k, b)})")
        who = ", ".join(keep[:3]) + (f" and {len(keep) - 3} more" if len(keep) > 3 else "")
        name = tree.names[c]
        detail = (
            f"it requests {fmt_amount(k, req[k])} but {name} can get at most "
            f"{fmt_amount(k, room.get(k, 0))} while, within {tree.names[p]}, {who} keep "
            f"their guaranteed minimum for their own demand; it can start when that "
            f"demand falls, and meanwhile {name}'s share goes to work that can use it"
        )
        shortfall = Resources.from_raw(short)
        return Explanation(
            0,
            EXPLAIN_QUOTA,
            quota=name,
            shortfall=shortfall,
            limit="guarantees",
            to_free=shortfall,
            detail=detail,
        )
    # Not cut by a sibling's min at any level (capacity changed within the cycle):
    # short of the quota's runtime, as the cycle found it.
    return Explanation(0, EXPLAIN_QUOTA, quota=tree.names[qi], limit="runtime")


def still_unusable(
    tree: QuotaTree,
    capacity: Mapping[str, int],
    own_demand: Sequence[Mapping[str, int]],
    ws: Sequence[tuple[int, WorkloadSpec]],
    started: Mapping[int, float],
) -> list[tuple[int, WorkloadSpec]]:
    """Of ``ws`` ((quota index, workload) pairs), those not ``started`` that still ask
    more than their quota can get with ``own_demand`` as it stands."""
    rooms = Rooms(tree, capacity, tree.demand(own_demand))
    return [
        (qi, w)
        for qi, w in ws
        if w.id not in started and any(v > rooms.of(qi).get(k, 0) for k, v in w._request._d.items())
    ]

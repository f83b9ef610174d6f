"""The room rules a quota's min and max set on what may start, shared by the cycle
(:mod:`.cycle`, :class:`.cyclestate.CycleState`) and the ETA forecast
(:mod:`.forecast_sim`, :mod:`.forecast_aging`): a non-preemptible workload stays within
its quota's min, and work behind an aged head that holds its quota's room goes on only
within the min and where the head still fits under the max.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["hold_rooms", "nonpreemptible_short", "passes_hold", "room_under_min"]


def nonpreemptible_short(
    mins: Mapping[str, int], np_used: Mapping[str, int], req: Mapping[str, int]
) -> str:
    """The first resource in which a non-preemptible ``req`` does not fit, or "".

    koord-queue's rule for a job labelled ``preemptible: "false"``: the quota's
    non-preemptible usage plus the request must stay within the quota's min, so it
    never holds what a lender could reclaim. As Koordinator compares them
    (``quotav1.LessThanOrEqual(used + request, min)``), only the resources the min
    names are bounded: a min of 0 cpu allows no cpu, a min silent on memory leaves
    memory to the ordinary fit. Shared by the cycle and the ETA forecast.
    """
    for k, v in req.items():
        m = mins.get(k)
        if m is not None and np_used.get(k, 0) + v > m:
            return k
    return ""


def room_under_min(used: Mapping[str, int], mins: Mapping[str, int]) -> dict[str, int]:
    """Per resource a quota's min names (> 0): ``min - used``."""
    return {k: m - used.get(k, 0) for k, m in mins.items() if m > 0}


def within_room(req: Mapping[str, int], room: Mapping[str, int]) -> bool:
    """Whether ``req`` stays within a quota's ``room`` under its min
    (:func:`room_under_min`): some resource of it is there, and none asks more.
    ``CycleState.within_min`` for callers that ask it of many requests at one load."""
    named = False
    for k, v in req.items():
        r = room.get(k)
        if r is not None:
            if v > r:
                return False
            named = True
    return named


def hold_rooms(
    used: Mapping[str, int],
    mins: Mapping[str, int],
    maxes: Mapping[str, int],
    head: Mapping[str, int],
) -> tuple[dict[str, int], dict[str, int]]:
    """What work of a quota may ask to go on behind its aged ``head`` (its request),
    which holds the quota's room in its queue (``Cycle.hold_aged``), at usage ``used``:
    the quota's room under its min (the resources its min names, > 0) and, per
    resource of the head's request that its max names, the room under the max beside
    that request. Read by :func:`passes_hold`; shared by the cycle
    (``Cycle.hold_room``) and the ETA forecast.
    """
    under_min = room_under_min(used, mins)
    under_max = {
        k: m - used.get(k, 0) - v for k, v in head.items() if (m := maxes.get(k)) is not None
    }
    return under_min, under_max


def passes_hold(
    req: Mapping[str, int], under_min: Mapping[str, int], under_max: Mapping[str, int]
) -> bool:
    """Whether ``req`` goes on behind an aged head that holds its quota's room.

    Within the quota's guaranteed min (some resource of ``req`` is named by it, and
    none asks more than its room), and the head still fits under its quota's max with
    ``req`` admitted: what the head waits for is then still there for it. Work beyond
    the min, or that would leave the head no room under the max, waits for it.
    ``under_min`` and ``under_max`` are :func:`hold_rooms`.
    """
    if not within_room(req, under_min):
        return False
    # (A loop, not all() over a generator: the cycle asks it of every candidate
    # behind such a head, ~27k a cycle at 60k workloads.)
    for k, r in under_max.items():  # noqa: SIM110
        if req.get(k, 0) > r:
            return False
    return True

"""ETAs held to what their sentences state: aging's bound and a preemptor's wait.

An explanation may promise a start ("starts by T at the latest", aging's bound; a
preemptor that waits for named work to end or be evicted). :func:`bound_etas` keeps
the published ETA within that promise, with :func:`typical_bound` (the same bound with
typical runtimes, for a p50 beside it) and :func:`awaited_starts` (when a waiting
preemptor starts, from what its explanation says it waits for). Split out of
:mod:`.eta`, which makes the ETAs these correct.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from queueing.engine.aging import claim_full_at
from queueing.engine.bound import tree_holders
from queueing.engine.cyclestate import runtime_of
from queueing.engine.types import EXPLAIN_PREEMPTING, Eta, Explanation, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["awaited_starts", "bound_etas", "typical_bound"]


def typical_bound(cy: Cycle) -> Callable[[int], float | None]:
    """Aging's bound with typical runtimes, per waiting workload id: a p50 beside it.

    The bound (:mod:`.bound`, "starts by T at the latest") is when the head's claim is
    whole and every workload holding capacity in its tree (:func:`.bound.tree_holders`,
    the cycle's own admissions too) has reached its declared limit. Work uses a share of its limit (``Snapshot.runtime_ratio``): with the median
    share, as the forward simulation runs it (one past its typical share ends half way
    to its limit), the same argument gives a time that is typical rather than
    guaranteed -- equal to the bound when runtimes equal their limits, earlier when
    they vary. None for a workload the cycle does not know.
    """
    now = cy.now
    tree = cy.tree
    ends: dict[int, float] = {}
    by_id: dict[int, WorkloadSpec] = {}

    def end_of(root: int) -> float:
        got = ends.get(root)
        if got is None:
            got = now
            for w in tree_holders(cy, root):
                start = w.started_at if w.started_at is not None else now
                end = start + runtime_of(cy, w, 0)
                if end < now:
                    limit = w.expected_runtime_s or 0.0
                    end = now + max(0.0, start + limit - now) * 0.5
                got = max(got, end)
            ends[root] = got
        return got

    def typical(wid: int) -> float | None:
        if not by_id:
            by_id.update((w.id, w) for w in cy.snapshot.workloads)
        w = by_id.get(wid)
        qi = cy.quota_of.get(wid)
        spec = cy.queue_specs.get(w.queue) if w is not None else None
        if w is None or qi is None or spec is None:
            return None
        full = claim_full_at(spec, w)
        if full is None:
            return None
        return max(full, end_of(tree.chains[qi][-1]), now)

    return typical


def awaited_starts(
    cy: Cycle, explanations: Mapping[int, Explanation]
) -> dict[int, tuple[float, float]]:
    """When each waiting preemptor starts, from what its explanation says it waits for.

    The capacity its victims release is reserved for it (the sentence says so): victims
    being evicted (``limit="evicting"``) typically release it by the next cycle, as the
    forward simulation assumes too -- which yet forecast some such preemptors minutes away
    (gpu-heavy: 102-770 s for starts within one cycle); work awaited instead of
    evicted (``limit="finishing"``) ends by its declared limit, within the preemption
    grace period, and typically after its queue's median share of it, as the
    simulation runs it. Per preemptor id: (typical start, latest start -- infinite for
    an eviction, whose duration is the cluster's), at the cycle after those ends; none for one whose explanation names nothing it waits for, or
    work whose end is not known (no limit, or past it).
    """
    now = cy.now
    tick = max(0.0, cy.config.cycle_interval_s)

    def next_cycle(t: float) -> float:
        if tick <= 0:
            return t
        return now + math.ceil(max(0.0, t - now) / tick - 1e-9) * tick

    out: dict[int, tuple[float, float]] = {}
    finishing: list[Explanation] = []
    # The waiting preemptors (a handful, not every explanation): those with victims in
    # flight, and those awaiting work that finishes instead.
    for wid in {**cy.waiting, **cy.awaiting}:
        e = explanations.get(wid)
        if e is None or e.kind != EXPLAIN_PREEMPTING or not e.victims:
            continue
        if e.limit == "evicting":
            # Typically by the next cycle; how long an eviction takes is the cluster's
            # (pods' termination grace): the p90 stays what the calibration says.
            out[wid] = (now + tick, math.inf)
        elif e.limit == "finishing":
            finishing.append(e)
    if not finishing:
        return out
    # The awaited work holds capacity in the preemptor's own quota (in-quota) or, rarely,
    # elsewhere in its tree (reclaim): look there first, the whole cluster (tens of
    # thousands running) only for what is still missing.
    wanted = {v for e in finishing for v in e.victims}
    held: dict[int, WorkloadSpec] = {}
    for e in finishing:
        qi = cy.quota_of.get(e.workload_id)
        if qi is not None:
            for h in cy.holding[qi]:
                if h.id in wanted:
                    held[h.id] = h
    if len(held) < len(wanted):
        for ws in cy.holding:
            for h in ws:
                if h.id in wanted:
                    held[h.id] = h
    for e in finishing:
        typical = latest = now
        for vid in e.victims:
            v = held.get(vid)
            if v is None or not v.expected_runtime_s:
                break  # not known, or no limit: when it ends is not known
            start = v.started_at if v.started_at is not None else now
            limit_end = start + v.expected_runtime_s
            if limit_end < now:
                break  # past its limit: not known
            end = start + runtime_of(cy, v, 0)
            if end < now:
                end = now + (limit_end - now) * 0.5
            typical = max(typical, end)
            latest = max(latest, limit_end)
        else:
            out[e.workload_id] = (next_cycle(typical), next_cycle(latest))
    return out


def bound_etas(
    explanations: Mapping[int, Explanation],
    etas: dict[int, Eta],
    typical: Callable[[int], float | None] | None = None,
    awaited: Mapping[int, tuple[float, float]] | None = None,
) -> int:
    """No ETA after the aging bound its explanation states (``starts_by``).

    The sentence promises "starts by T at the latest"; an ETA beside it whose p50 or
    p90 is later contradicts it. Measured in virtual time (demo with waves, gpu-heavy)
    and live, every workload it was stated for started by its last statement of it
    (by the first, all but 3 of 102), while the calibrated
    p90 beside it was later in 30-80 % of the observations. So the ETA is capped at
    the bound (in place); returns how many were.

    A p50 past the bound falls back to the simulation's own start when that is within
    it, else to ``typical(workload id)``: the same bound with typical runtimes instead
    of declared limits (:func:`.eta_bounds.typical_bound`) -- below the bound when runtimes
    vary, so the p50 is not the p90 (it was, in 8 % of gpu-heavy's bounded
    observations); else the bound itself.

    A workload with no ETA (beyond the forecast horizon, or the budget spent) beside a
    stated bound gets one from the bound: p90 the bound, p50 ``typical`` when it is
    earlier (else the bound). Live, 25 observations of "starts by T" stood beside "not
    admitted within the forecast horizon (24 h)", and the workload then started before
    the bound.

    Likewise a waiting preemptor's ETA is never after the start its sentence implies
    (``awaited``: per preemptor id, typical and latest, see :func:`.eta_bounds.awaited_starts`).
    """
    capped = 0
    for wid, e in explanations.items():
        bound = e.starts_by
        if bound is None:
            continue
        eta = etas.get(wid)
        if eta is None or (eta.p90 is not None and eta.p90 <= bound):
            continue
        if eta.p90 is None:
            # No start within the horizon (or the budget): the forecast does not model
            # aging's claim, and "no ETA" beside "starts by T" reads as a contradiction.
            # The bound is its p90; the p50 the same bound with typical runtimes when
            # that is earlier (as below), and the reason goes: there is an ETA now.
            typical_start = typical(wid) if typical is not None else None
            start = typical_start if typical_start is not None and typical_start < bound else bound
            etas[wid] = dataclasses.replace(eta, p50=start, p90=bound, reason="")
            capped += 1
            continue
        p50 = eta.p50
        if p50 is None or p50 >= bound:
            # The simulation's own start, when it is within the bound (the calibration
            # is what moved the p50 past it); else the bound with typical runtimes.
            sim = eta.forecast
            typ = typical(wid) if typical is not None else None
            if sim is not None and sim < bound:
                p50 = sim
            elif typ is not None and typ < bound:
                p50 = typ
            else:
                p50 = bound
        etas[wid] = dataclasses.replace(eta, p50=p50, p90=bound)
        capped += 1
    for wid, (typ, latest) in (awaited or {}).items():
        eta = etas.get(wid)
        if eta is None or eta.p50 is None or eta.p90 is None:
            continue
        lo = min(eta.p50, typ)
        hi = max(lo, min(eta.p90, latest))
        if (lo, hi) != (eta.p50, eta.p90):
            etas[wid] = dataclasses.replace(eta, p50=lo, p90=hi)
            capped += 1
    return capped

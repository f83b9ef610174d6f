"""From the forward simulation's start times to the ETAs people are shown.

The simulation (:mod:`.forecast`) gives, per waiting workload, when it would start
if runtimes were their medians and nothing new arrived. Three corrections make that a
promise one can hold the engine to:

0. **Arrivals.** Work of higher priority arriving while a workload waits goes
   before it: with ``Snapshot.arrival_load`` (offered load per root quota and
   priority, from recent history) the simulated wait ``d`` is stretched to
   ``d / (1 - load above its priority)`` -- the completion time of low-priority work
   in a priority queue (a busy period; Cobham), at most ``MAX_STRETCH`` times.
1. **Calibration.** With ``Snapshot.eta_residuals`` (the measured error of earlier
   forecasts, see :mod:`.calibration`), the predicted wait ``d`` becomes
   ``p50 = d + s * e50`` and ``p90 = d + s * e90`` with ``s = max(d, floor)``: the
   error of the past, in proportion to the wait. Without it (a cold start), the p90
   comes from a second simulation with p90 runtimes.
2. **Hysteresis.** Against ``Snapshot.previous_etas``, a new p50 within the tolerance
   (a tenth of the remaining wait, at least ``min_tolerance_s``) of the old one keeps
   the old one (``moved="kept"``); beyond it, the ETA moves and says so
   (``earlier``/``later`` with ``delta_s``) once two forecasts in a row agree it must
   (the first is held as ``pending``), or at once as ``overdue`` when the old one
   passed.
3. **Order.** In a strict-order queue a workload cannot start before one ahead of it
   on the same quota: its ETA is at least theirs.

A competing workload the simulation did not reach gets a reason instead of a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from queueing.engine.calibration import FLOOR_S, eta_classes
from queueing.engine.types import Eta, Position

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["finish_etas"]

#: A new ETA closer than this to the previous one (or a tenth of the wait) keeps it.
MIN_TOLERANCE_S = 5.0
TOLERANCE = 0.25
#: Higher-priority arrivals stretch a wait at most this many times (a load near or above
#: the capacity would stretch it without bound; the measured error takes over there).
MAX_STRETCH = 3.0


def finish_etas(
    cy: Cycle,
    pos: Mapping[int, Position],
    p50: Mapping[int, float],
    p90: Mapping[int, float],
    *,
    out_of_time: bool,
) -> dict[int, Eta]:
    """Calibrated, steady, order-respecting ETAs for every positioned workload."""
    now = cy.now
    snap = cy.snapshot
    res = snap.eta_residuals
    prev = snap.previous_etas
    no_eta = (
        "the forecast ran out of its time budget before reaching it"
        if out_of_time
        else f"not admitted within the forecast horizon ({_duration(cy.config.eta_horizon_s)})"
    )
    classes: dict[int, tuple[str, ...]] = {}
    stretch: dict[int, float] = {}
    load = snap.arrival_load
    if res or load:
        tree = cy.tree
        above_cache: dict[tuple[str, int], float] = {}
        for q in cy.queues:
            for cw in q.cands:
                if cw.id not in pos:
                    continue
                if res:
                    classes[cw.id] = eta_classes(cw.queue, cw.priority)
                if load:
                    root = tree.names[tree.chains[cy.quota_of[cw.id]][-1]]
                    lkey = (root, cw.priority)
                    f = above_cache.get(lkey)
                    if f is None:
                        bands = load.get(root, {})
                        above = sum(v for p, v in bands.items() if p > cw.priority)
                        f = above_cache[lkey] = 1.0 / max(1.0 - above, 1.0 / MAX_STRETCH)
                    stretch[cw.id] = f
    model: dict[int, float] = {}
    raw: dict[int, tuple[float, float]] = {}
    for wid in pos:
        a = p50.get(wid)
        if a is None:
            continue
        # Higher-priority arrivals during the wait stretch it (a busy period).
        d = max(0.0, a - now) * stretch.get(wid, 1.0)
        model[wid] = now + d
        err = None
        for key in classes.get(wid, ()):
            err = res.get(key)
            if err is not None:
                break
        if err is not None:
            s = max(d, FLOOR_S)
            lo = now + max(0.0, d + s * err[0])
            hi = now + max(0.0, d + s * err[1])
        else:
            lo = now + d
            hi = now + max(0.0, p90.get(wid, a) - now) * stretch.get(wid, 1.0)
        raw[wid] = (lo, max(hi, lo))
    _order(cy, raw)
    etas: dict[int, Eta] = {}
    for wid in pos:
        got = raw.get(wid)
        if got is None:
            etas[wid] = Eta(None, None, reason=no_eta)
            continue
        lo, hi = got
        sim = model.get(wid)
        old = prev.get(wid)
        if old is None or old.p50 is None or old.p90 is None:
            etas[wid] = Eta(lo, hi, moved="first", forecast=sim)
            continue
        if old.p50 < now:
            etas[wid] = Eta(lo, hi, moved="overdue", delta_s=lo - old.p50, forecast=sim)
            continue
        tol = max(MIN_TOLERANCE_S, TOLERANCE * (old.p50 - now))
        if abs(lo - old.p50) <= tol and abs(hi - old.p90) <= max(tol, TOLERANCE * (old.p90 - now)):
            etas[wid] = Eta(old.p50, old.p90, moved="kept", forecast=sim)
        elif old.moved and not _confirmed(old, lo, tol):
            # A first jump is held for one cycle: it is published when the next
            # forecast agrees (a spike of one cycle -- one job's end reordered -- is not).
            etas[wid] = Eta(old.p50, old.p90, moved="kept", forecast=sim, pending=lo)
        else:
            etas[wid] = Eta(
                lo,
                hi,
                moved="earlier" if lo < old.p50 else "later",
                delta_s=lo - old.p50,
                forecast=sim,
            )
    # Hysteresis may keep an old value behind a moved one: order again.
    kept: dict[int, tuple[float, float]] = {
        w: (e.p50, e.p90) for w, e in etas.items() if e.p50 is not None and e.p90 is not None
    }
    if _order(cy, kept):
        for w, (lo, hi) in kept.items():
            e = etas[w]
            if (lo, hi) != (e.p50, e.p90):
                etas[w] = Eta(lo, hi, moved=e.moved, delta_s=e.delta_s, forecast=e.forecast)
    return etas


def _confirmed(old: Eta, lo: float, tol: float) -> bool:
    """Whether the previous cycle already wanted to move the ETA the same way."""
    if old.pending is None or old.p50 is None:
        return False
    before = old.pending - old.p50
    now = lo - old.p50
    return abs(before) > tol and (before > 0) == (now > 0)


def _order(cy: Cycle, etas: dict[int, tuple[float, float]]) -> bool:
    """In strict-order queues no ETA is before one ahead of it on the same quota."""
    changed = False
    quota_of = cy.quota_of
    for q in cy.queues:
        if not q.spec.blocking:
            continue
        latest: dict[int, tuple[float, float]] = {}
        for w in q.cands:
            got = etas.get(w.id)
            if got is None:
                continue
            qi = quota_of[w.id]
            before = latest.get(qi)
            if before is not None and (got[0] < before[0] or got[1] < before[1]):
                got = (max(got[0], before[0]), max(got[1], before[1]))
                etas[w.id] = got
                changed = True
            latest[qi] = got
    return changed


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"

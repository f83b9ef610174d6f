"""One admission cycle: snapshot in, decisions out.

The steps, in order (DESIGN section 3):

1. **Index** the snapshot: quota tree, node free capacity, holdings, the competing
   workloads per queue in queue order (priority, queue-order time, id).
2. **Runtime quota** for every quota node (:mod:`.quota`).
3. **Timeouts**: admitted workloads that never started within their queue's
   ``admission_timeout_s`` are requeued with backoff (they keep holding capacity
   until the caller suspends them).
4. **Nominated first**: preemptors from earlier cycles whose victims have released
   their capacity are admitted before anyone else may take it; those still waiting
   reserve what they will need.
5. **Tournament**: the queues' candidates compete in a heap ordered by queue
   priority, fair-share score, workload priority, queue-order time and id; the
   scores are re-evaluated lazily after every admission. Each candidate must fit its
   quota chain (``used + request <= min(runtime, max)`` at every level) and place
   all its pods at once. A candidate that does not fit may preempt (victims are
   marked Preempted, the preemptor waits for a later cycle with the capacity
   reserved) and, under Block or Intelligent, blocks those behind it on its quota.
6. **Explain** every workload left waiting (:mod:`.explain`).
7. **Positions and ETA** (:mod:`.forecast`), unless ``forecast=False``.

Admissions update the in-memory state as they happen, so the rest of the cycle
sees them. Within a cycle capacity only shrinks (victims keep holding until the
cluster confirms), which makes failures safe to memoise.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Mapping
from time import perf_counter
from typing import Any

from queueing.engine import backoff
from queueing.engine.cyclestate import (
    F_DEPTH,
    F_NEVER,
    F_NODES,
    F_NPMIN,
    F_POLICY,
    F_QUOTA,
    F_WAITING,
    QueueState,
    order_key,
)
from queueing.engine.drains import Drains
from queueing.engine.eta import mark_by_age
from queueing.engine.eta_bounds import awaited_starts, bound_etas, typical_bound
from queueing.engine.explain import explain_all
from queueing.engine.forecast import forecast as run_forecast
from queueing.engine.holds import hold_rooms, passes_hold, within_room
from queueing.engine.lazy_explanations import Explanations
from queueing.engine.lending import lend
from queueing.engine.preemption import find_victims, search_key
from queueing.engine.reservations import node_holds
from queueing.engine.resources import Resources
from queueing.engine.types import (
    ADMITTED,
    CycleResult,
    Explanation,
    Preemption,
    Requeue,
    Snapshot,
    WorkloadSpec,
)

__all__ = ["Cycle", "run_cycle"]


class Cycle(Drains):
    """One cycle: build it from a snapshot, call :meth:`run`, read :meth:`result`."""

    # -- steps -----------------------------------------------------------------------

    def run(self) -> None:
        """Steps 3 to 5: timeouts, nominated preemptors, the tournament, and the room
        no candidate of its quota could use lent to work that fits it (:mod:`.lending`)."""
        t0 = perf_counter()
        self.requeue_timeouts()
        self.admit_nominated()
        t1 = perf_counter()
        self.tournament()
        t2 = perf_counter()
        self.stats["lend_tried"], self.stats["lent"] = lend(self)
        self.stats["nominated_s"] = t1 - t0
        self.stats["tournament_s"] = t2 - t1
        self.stats["lend_s"] = perf_counter() - t2
        # The headroom cache is for the tournament (empty again, it refills on use).
        self._headroom = [None] * len(self._headroom)
        # The victim-search indexes point back at the cycle; drop them so the cycle is
        # freed by reference counting, not by a later garbage collection.
        self.preemptor = None

    def requeue_timeouts(self) -> None:
        """Admitted workloads that never started within the queue's timeout go back."""
        now = self.now
        specs = self.queue_specs
        for ws in self.holding:
            for w in ws:
                if w.phase != ADMITTED or w.started_at is not None or w.admitted_at is None:
                    continue
                spec = specs.get(w.queue)
                if spec is None or spec.admission_timeout_s is None:
                    continue
                if now - w.admitted_at >= spec.admission_timeout_s:
                    attempts = w.attempts + 1
                    at = backoff.requeue_at(
                        now,
                        attempts,
                        spec.backoff_base_s,
                        spec.backoff_max_s,
                        spec.backoff_jitter,
                        seed=w.id,
                    )
                    self.requeues.append(Requeue(w.id, at, "AdmissionTimeout"))

    def admit_nominated(self) -> None:
        """Step 4: preemptors of earlier cycles go first while their capacity arrives."""
        ids = set(self.nominated_in) | set(self.inflight)
        if not ids:
            return
        cands = []
        for q in self.queues:
            for w in q.cands:
                if w.id in ids:
                    cands.append(w)
        # Those whose victims are all gone first: each kept its room reserved in the cycles
        # its victims took to leave, and the preemptors still waiting chose their own
        # victims around that reservation. Taking it back in plain priority order let a
        # waiting preemptor's reservation land on that room, the ready one fail, its
        # victim be admitted again into the room, and be evicted again next cycle.
        inflight = self.inflight
        cands.sort(key=lambda w: (bool(inflight.get(w.id)), order_key(w)))
        for w in cands:
            qi = self.quota_of[w.id]
            victims = inflight.get(w.id, [])
            req = w._request._d
            if not victims:
                # Everything it preempted is gone: admit now if it fits, else compete.
                if self.quota_fail(qi, req) < 0 and not self.np_short(w, qi):
                    shape = self.shape(w)
                    if shape not in self.failed_shapes:
                        pl = self.nodes.place(self.reqs(w))
                        if pl is not None:
                            self.admit(w, qi, pl.per_node, pl.placements, nominated=True)
                            continue
                continue
            freed, extra = self.victims_release(victims)
            self.waiting[w.id] = tuple(v.id for v in victims)
            self.fail[w.id] = (F_WAITING, 0)
            if self.quota_fail(qi, req, freed) < 0:
                pl = self.nodes.place(self.reqs(w), extra)
                self.reserve(w.id, qi, req, freed, pl.per_node if pl else None, extra)
                if pl is not None:
                    claimed = self.inflight_claimed
                    for i, amount in pl.per_node.items():
                        x = extra.get(i)
                        if not x:
                            continue
                        c = claimed.setdefault(i, {})
                        for k, v in amount.items():
                            got = min(v, x.get(k, 0))
                            if got > 0:
                                c[k] = c.get(k, 0) + got

    def tournament(self) -> None:
        """Step 5: admit across queues in fair-share order, re-ranked after each admission."""
        score = self.fair.score
        quota_of = self.quota_of
        fail = self.fail
        failed_shapes = self.failed_shapes
        nodes = self.nodes
        waiting = self.waiting
        admitted_ids = self.admitted_ids
        quota_fail = self.quota_fail
        heap: list[tuple[int, int, float, int, float, int, int, int]] = []
        queues = self.queues
        preemption_on = self.config.preemption
        # Nominated workloads that were admitted or are waiting are out of the race.
        skip = admitted_ids | set(waiting)
        unusable = self.unusable_ids

        preempt_tried = self.preempt_tried
        shape_of = self.shape
        may_fit = nodes.may_fit
        min_room = self.min_room
        hold_room = self.hold_room
        may_pass = passes_hold
        nodes_none = (F_NODES, None)  # (one tuple for the ~35k such failures at 60k)
        # (Filled in place as drains start: Drains.starving.)
        yielding = self.yielding
        yield_failed = self.yield_failed
        drained = self.drained
        # One record per blocking head, chain node, shape (not a tuple per candidate:
        # ~25k fewer objects for the collector to traverse at 60k).
        policy_rec: dict[int, tuple[int, int]] = {}
        quota_rec: dict[int, tuple[int, int]] = {}
        nodes_rec: dict[Any, tuple[int, Any]] = {}
        depth_rec = (F_DEPTH, 0)

        def advance(q: QueueState) -> WorkloadSpec | None:
            """Move ``q`` to its next candidate that may be tried, or None.

            A candidate that cannot fit *now* cannot fit later in the cycle either
            (capacity only shrinks), so when it could not preempt anyway (its queue
            and quota used their one attempt, or preemption is off) it fails right
            here, without a turn in the tournament.
            """
            cands = q.cands
            blocked = q.blocked
            aged_heads = q.aged_heads
            may_preempt = preemption_on and q.may_preempt
            qidx = q.index
            aged_cut = q.aged_before
            block_all = q.block_all
            intelligent = q.intelligent
            threshold = q.threshold
            headroom = self._headroom
            load_version = self._load_version  # (no admission while a queue advances)
            chain_headroom = self._chain_headroom
            pos = q.pos
            limit = q.limit
            # Per quota, refreshed when the candidates' quota changes (they mostly
            # share one): which of its three searches this queue has tried
            # (preempt_tried does not change while a queue advances), its room under
            # its min (for within_min) and its chain's cached headroom.
            tq = -1
            tried0 = tried1 = tried2 = False
            room: dict[str, int] | None = None
            head: dict[str, tuple[int, int]] = {}
            rooms_of: dict[int, tuple[dict[str, int], dict[str, int]]] = {}
            while pos < limit:
                w = cands[pos]
                wid = w.id
                if wid in skip:
                    if wid in waiting:
                        if q.blocks(w):
                            blocked.setdefault(quota_of[wid], wid)
                        elif w.queue_order_at <= aged_cut:
                            aged_heads.setdefault(quota_of[wid], wid)
                    pos += 1
                    continue
                qi = quota_of[wid]
                if blocked:
                    b = blocked.get(qi)
                    if b is not None:
                        # Work within its min may pass an aged head that holds the
                        # quota (hold_room: its rooms, read once per quota and
                        # advance -- no admission while a queue advances).
                        passes = False
                        if aged_heads.get(qi) == b:
                            hr = rooms_of.get(qi)
                            if hr is None:
                                hr = rooms_of[qi] = hold_room(qi, b)
                            passes = may_pass(w._request._d, hr[0], hr[1])
                        if not passes:
                            rec = policy_rec.get(b)
                            if rec is None:
                                rec = policy_rec[b] = (F_POLICY, b)
                            fail[wid] = rec
                            pos += 1
                            # Work waiting behind its quota's head gets no turn, so it
                            # does not use the queue's look-ahead (max_depth): filled
                            # with it, the window never reached work of another quota
                            # whose demand held the very room the head waited for (a
                            # livelock the liveness property test found).
                            if limit < len(cands):
                                limit += 1
                            continue
                if qi != tq:
                    tq = qi
                    tried0 = (qidx, qi, 0) in preempt_tried
                    tried1 = (qidx, qi, 1) in preempt_tried
                    tried2 = (qidx, qi, 2) in preempt_tried
                    room = None
                    cached = headroom[qi]
                    if cached is None or cached[0] != load_version:
                        cached = headroom[qi] = (load_version, {})
                    head = cached[1]
                req = w._request._d
                if may_preempt:
                    # Untried search_key: the candidate gets its turn. Which kind it is
                    # (within min or not) is only worked out when just one is tried.
                    untried_aged = not (tried1 if w.queue_order_at <= aged_cut else tried0)
                    if untried_aged != tried2:
                        if untried_aged:
                            break
                    else:
                        # within_min(qi, req), from the quota's room under its min.
                        if room is None:
                            room = min_room(qi)
                        if untried_aged != within_room(req, room):
                            break
                # Fast fail: the quota chain's headroom (quota_fail, from its cache),
                # then the nodes' largest free slot (single pod set), then the memo of
                # failed gang shapes.
                c = -1
                for k, v in req.items():
                    hk = head.get(k)
                    if hk is None:
                        hk = head[k] = chain_headroom(qi, k)
                    if v > hk[0]:
                        c = hk[1]
                        break
                # (np_short: only a non-preemptible workload can be short of its min.)
                np_c = not w.preemptible and bool(self.np_short(w, qi))
                if np_c:
                    c = qi
                blocks = block_all or (intelligent and w.priority >= threshold)
                # The first aged workload of its quota to fail holds room for itself in
                # any queue (hold_aged).
                aged = not blocks and w.queue_order_at <= aged_cut and qi not in aged_heads
                if c >= 0:
                    if np_c:
                        fail[wid] = (F_NPMIN, qi)
                    else:
                        rec = quota_rec.get(c)
                        if rec is None:
                            rec = quota_rec[c] = (F_QUOTA, c)
                        fail[wid] = rec
                        if wid in unusable and limit < len(cands):
                            # It cannot start while its siblings' demand holds their
                            # mins (CycleState.unusable_ids): like work parked behind
                            # a head, it does not use the look-ahead (filled with such
                            # work, the window never reached a job that fitted).
                            limit += 1
                else:
                    pod_sets = w.pod_sets
                    if len(pod_sets) == 1:
                        ps0 = pod_sets[0]
                        fits = may_fit(ps0._elig, ps0.requests._d)
                    else:
                        fits = True
                    if yielding:
                        # within_min(qi, req), as above (asked of most candidates once
                        # drains yield).
                        if room is None:
                            room = min_room(qi)
                        if within_room(req, room) and shape_of(w) not in yield_failed:
                            break  # it may place on drained room (place_within_min)
                    if drained and self.backfill_end(w) is not None:
                        break  # it may backfill drained room (place_backfill)
                    if not fits:
                        fail[wid] = nodes_none
                    else:
                        shape = shape_of(w)
                        if shape not in failed_shapes:
                            break
                        nrec = nodes_rec.get(shape)
                        if nrec is None:
                            nrec = nodes_rec[shape] = (F_NODES, shape)
                        fail[wid] = nrec
                    if (blocks or aged) and self.set_aside_on_nodes(w):
                        pos += 1
                        continue
                if blocks:
                    blocked.setdefault(qi, wid)
                    self.starving(q, w, qi, c)
                elif aged:
                    self.hold_aged(q, w, qi, c)
                if (blocks or aged) and limit < len(cands):
                    # The head that holds its quota does not use the look-ahead either:
                    # heads of as many quotas as the depth, each short of a claim
                    # served to an older head beyond them, left that head untried and
                    # its room idle (the liveness scan, seed 2447).
                    limit += 1
                pos += 1
            q.pos = pos
            q.limit = limit
            if pos < limit:
                return cands[pos]
            for w in cands[q.pos :]:
                if w.id not in skip and w.id not in fail:
                    b = q.blocked.get(quota_of[w.id])
                    if b is None:
                        fail[w.id] = depth_rec
                    else:
                        rec = policy_rec.get(b)
                        if rec is None:
                            rec = policy_rec[b] = (F_POLICY, b)
                        fail[w.id] = rec
            return None

        qver = self.qver
        jumped: set[tuple[int, int]] = set()

        def entry_for(q: QueueState) -> tuple[int, int, float, int, float, int, int, int] | None:
            w = advance(q)
            if w is None:
                return None
            qi = quota_of[w.id]
            # The first aged candidate of each queue and quota goes before work that has
            # not aged (of the same queue priority), once per cycle, the oldest first;
            # then fair share.
            tier = 1
            if w.queue_order_at <= q.aged_before:
                key = (q.index, qi)
                if key not in jumped:
                    jumped.add(key)
                    tier = 0
            return (
                -q.spec.priority,
                tier,
                score(qi, w._request._d) if tier else w.queue_order_at,
                -w.priority,
                w.queue_order_at,
                w.id,
                q.index,
                qver[qi],
            )

        for q in queues:
            e = entry_for(q)
            if e is not None:
                heap.append(e)
        heapq.heapify(heap)
        heappop = heapq.heappop
        heappushpop = heapq.heappushpop
        heapreplace = heapq.heapreplace
        entry = heappop(heap) if heap else None
        while entry is not None:
            qp, tier, s, np_, ts, wid, qidx, ver = entry
            q = queues[qidx]
            w = q.cands[q.pos]
            qi = quota_of[wid]
            req = w._request._d
            if tier and qver[qi] != ver:
                # The quota admitted something since: its score can only have grown.
                s2 = score(qi, req)
                if s2 > s:
                    entry = heappushpop(heap, (qp, tier, s2, np_, ts, wid, qidx, qver[qi]))
                    continue
            # Quota fit, then gang fit.
            # A non-preemptible workload beyond its quota's min: no victim can help
            # (non-preemptible work is never one), it waits for such work to end.
            np_c = not w.preemptible and bool(self.np_short(w, qi))
            c = qi if np_c else quota_fail(qi, req)
            ok = False
            if c < 0:
                shape = self.shape(w)
                if shape not in failed_shapes:
                    pl = nodes.place(self.reqs(w))
                    if pl is not None:
                        self.admit(w, qi, pl.per_node, pl.placements)
                        ok = True
                    else:
                        failed_shapes.add(shape)
                if not ok and self.yielding:
                    pl = self.place_within_min(w, qi)
                    if pl is not None:
                        self.admit(w, qi, pl.per_node, pl.placements)
                        ok = True
                if not ok and self.drained:
                    pl = self.place_backfill(w)
                    if pl is not None:
                        self.admit(w, qi, pl.per_node, pl.placements)
                        ok = True
                if not ok:
                    nrec = nodes_rec.get(shape)
                    if nrec is None:
                        nrec = nodes_rec[shape] = (F_NODES, shape)
                    fail[wid] = nrec
            elif np_c:
                fail[wid] = (F_NPMIN, qi)
            else:
                rec = quota_rec.get(c)
                if rec is None:
                    rec = quota_rec[c] = (F_QUOTA, c)
                fail[wid] = rec
                if wid in unusable and q.limit < len(q.cands):
                    q.limit += 1  # no look-ahead for it (see advance)
            aged = not ok and not q.blocks(w) and q.aged(w) and qi not in q.aged_heads
            if not ok and c < 0 and (q.blocks(w) or aged) and self.set_aside_on_nodes(w):
                ok = True  # inadmissible: neither preempts nor blocks
            elif not ok:
                if preemption_on and not np_c and self._may_preempt(q, w, qi):
                    found = find_victims(self, w, qi, q.spec)
                    if found is not None:
                        self._preempt(w, qi, found)
                    else:
                        on_nodes = c < 0 and not self.within_min(qi, req)
                        self.preempt_failed.add((-1 if on_nodes else qi, w.priority, self.shape(w)))
                if q.blocks(w):
                    q.blocked.setdefault(qi, wid)
                    if fail.get(wid, (F_WAITING,))[0] != F_WAITING:
                        self.starving(q, w, qi, c)
                elif aged:
                    if fail.get(wid, (F_WAITING,))[0] == F_WAITING:
                        q.aged_heads[qi] = wid  # its victims' room is reserved for it
                    else:
                        self.hold_aged(q, w, qi, c)
                if (q.blocks(w) or aged) and q.limit < len(q.cands):
                    q.limit += 1  # no look-ahead for a head that holds its quota (advance)
            q.pos += 1
            # The queue's next candidate goes straight on when it still leads.
            nxt = entry_for(q)
            if nxt is None:
                entry = heappop(heap) if heap else None
            elif heap and heap[0] < nxt:
                entry = heapreplace(heap, nxt)
            else:
                entry = nxt

    def set_aside_on_nodes(self, w: WorkloadSpec) -> bool:
        """Whether ``w``'s gang cannot place even on empty eligible nodes (set aside).

        Asked only of candidates that would block their queue: elsewhere a gang that
        never fits is skipped anyway, and its explanation says it never fits.
        """
        shape = self.shape(w)
        why = self._never_nodes.get(shape, "")
        if why == "":
            why = self.nodes.never_fits(self.reqs(w))
            self._never_nodes[shape] = why
        if why is None:
            return False
        self.fail[w.id] = (F_NEVER, why)
        return True

    def hold_aged(self, q: QueueState, w: WorkloadSpec, qi: int, c: int) -> None:
        """The aged head of its quota in a queue whose policy does not block holds room.

        In a Priority queue (or under Intelligent, below the threshold) a head that
        does not fit is skipped, and smaller work of its own quota keeps taking every
        slot and every share of quota that frees: aging's claim and age order alone
        left the demo's 128-cpu gangs of analytics-adhoc and nlp-research waiting
        1,023 s live. Once it has waited its queue's ``aging_bound_s`` the first such
        workload of each quota holds what it waits for, as a strict-order head does,
        but no more: short of quota (``c`` >= 0), the work of its quota behind it in
        its queue waits (the quota's room then only grows, and its claim takes back
        what siblings borrow); short of nodes, only the nodes it needs are held back
        (:meth:`starving`) and work behind it goes on elsewhere -- a backfill.
        """
        q.aged_heads[qi] = w.id
        if c >= 0:
            q.blocked.setdefault(qi, w.id)
            self.holding_quota[w.id] = w._request._d
        self.starving(q, w, qi, c)

    def hold_room(self, qi: int, head: int) -> tuple[dict[str, int], dict[str, int]]:
        """What work of quota ``qi`` may ask to go on behind ``head``, the aged head
        that holds the quota's room in its queue (:meth:`hold_aged`): the quota's
        room under its min (:meth:`min_room`), and per resource of the head's request
        its room under the max beside that request, at the current load.

        Work within the quota's guaranteed ``min`` does not wait for it as long as
        the head still fits under its quota's ``max`` with that work admitted: what the
        head waits for (its aged claim, up to the max, taking back what siblings
        borrow) is then still there for it. Held back, such work left the min unused
        while the head waited (the live demo: nlp-research, 30 s). Work beyond the
        min, or that would leave the head no room under the max, still waits: letting
        all within-min work pass kept the head from its bound (1,760 s in
        tests/engine/test_starvation_priority.py's world).
        """
        return hold_rooms(
            self.load[qi], self.tree.mins[qi], self.tree.maxes[qi], self.holding_quota[head]
        )

    def search_key(self, q: QueueState, w: WorkloadSpec, qi: int) -> tuple[int, int, int]:
        """Which victim search of its queue and quota ``w`` may use this cycle.

        One each for: a candidate within its quota's min (a guaranteed claim, which may
        reclaim more), an aged one (first in its queue), any other. Otherwise a failing
        head that has nothing to preempt -- an aged low-priority job, a gang beyond the
        min -- uses up the search of a workload behind it that could.
        """
        return search_key(
            q.index, qi, self.within_min(qi, w._request._d), w.queue_order_at <= q.aged_before
        )

    def _may_preempt(self, q: QueueState, w: WorkloadSpec, qi: int) -> bool:
        """One victim search per queue, quota and :meth:`search_key` per cycle."""
        if not q.may_preempt:
            return False
        key = self.search_key(q, w, qi)
        if key in self.preempt_tried:
            return False
        self.preempt_tried.add(key)
        shape = self.shape(w)
        if (qi, w.priority, shape) in self.preempt_failed:
            return False
        # A gang that found no victims on nodes (its quota fitting) will not find them
        # for another quota at the same or lower priority either, as far as nodes go --
        # unless that quota is within its min, which may reclaim more (recorded per quota).
        return (-1, w.priority, shape) not in self.preempt_failed or self.within_min(
            qi, w._request._d
        )

    def _preempt(self, w: WorkloadSpec, qi: int, found: Any) -> None:
        victims, reasons, per_node, freed, extra = found
        for v, (reason, message) in zip(victims, reasons, strict=True):
            self.preemptions.append(Preemption(v.id, w.id, reason, message))
            self.victim_ids.add(v.id)
        self.waiting[w.id] = tuple(v.id for v in victims)
        self.fail[w.id] = (F_WAITING, 0)
        self.reserve(w.id, qi, w._request._d, freed, per_node, extra)

    # -- output ----------------------------------------------------------------------

    def result(self, *, forecast: bool = True) -> CycleResult:
        """Steps 6 and 7, and the decisions as a :class:`CycleResult`."""
        t0 = perf_counter()
        # With a forecast, built first (the forecast changes the nodes: it gives the
        # drains back). Else built when read (a cycle that only admits reads none, or a
        # few): nothing changes the cycle after this (see run_cycle).
        explanations: Mapping[int, Explanation] = (
            explain_all(self) if forecast else Explanations(self)
        )
        t1 = perf_counter()
        positions: dict[int, Any] = {}
        etas: dict[int, Any] = {}
        # The room kept on nodes, before the forecast gives it back.
        holds = node_holds(self.nodes.names, self.drained.items(), self.reservations)
        if forecast:
            # The forecast starts from true usage: what the drains held back for aged
            # heads is free room there (the heads come first in its order anyway). The
            # reservations of waiting preemptors are given back here and held again
            # by the simulation for all but their own preemptor (``reservations``,
            # ``forecast_sim.Simulation.holds``): held for it too, a preemptor could
            # not place on its own room (the demo's 16-GPU gang awaiting its victims'
            # ends was forecast at +38 s and started at +2 s); held for no one, the
            # work behind it took that room at once in the forecast.
            for take in (*self.drained.values(), *self.reserved):
                self.nodes.release(take)
            self.drained.clear()
            self.reserved.clear()
            self.yielding.clear()
            positions, etas = run_forecast(self)
            # never after the aging bound stated (a typical p50 below it), nor after
            # the start a preemptor's sentence implies
            bound_etas(explanations, etas, typical_bound(self), awaited_starts(self, explanations))
            # and say which it is earlier than work ahead of it, by age
            mark_by_age(self, etas)
        t2 = perf_counter()
        tree = self.tree
        names = tree.names
        result = CycleResult(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            requeues=tuple(self.requeues),
            explanations=explanations,
            positions=positions,
            etas=etas,
            runtime_quota={names[i]: Resources.from_raw(r) for i, r in enumerate(self.runtime)},
            used={names[i]: Resources.from_raw(r) for i, r in enumerate(self.used)},
            demand={names[i]: Resources.from_raw(r) for i, r in enumerate(self.demand)},
            shares={names[i]: self.fair.share(i) for i in range(len(names))},
            stats={},
            nominations=tuple(sorted(self.waiting)),
            awaiting=tuple(
                sorted(w for w, vs in self.waiting.items() if not vs and w in self.awaiting)
            ),
            holds=holds,
        )
        stats = dict(self.stats)
        stats.update(
            explain_s=t1 - t0,
            forecast_s=t2 - t1,
            admitted=len(self.admissions),
            preempted=len(self.preemptions),
            requeued=len(self.requeues),
            competing=sum(len(q.cands) for q in self.queues),
            queues=len(self.queues),
            nodes=len(self.nodes.names),
            quotas=len(names),
        )
        object.__setattr__(result, "stats", stats)
        return result


def run_cycle(snapshot: Snapshot, *, forecast: bool = True) -> CycleResult:
    """Run one admission cycle over ``snapshot`` and return its decisions.

    Pure: reads only the snapshot (``snapshot.now`` is the clock) and returns plain
    data; the same snapshot always gives the same decisions (``stats`` timings
    aside). With ``forecast=False`` positions and ETAs are left empty, which is
    what a caller that only needs admissions (or a benchmark of them) wants.
    """
    t0 = perf_counter()
    # The cycle allocates hundreds of thousands of small objects and creates no
    # garbage cycles; generational collections over the snapshot would only cost time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        cycle = Cycle(snapshot)
        cycle.run()
        result = cycle.result(forecast=forecast)
        # The cycle's working state (indexes, failure records, caches: a few hundred
        # thousand containers at 60k) is freed here by reference counting -- unless the
        # explanations, built when read (forecast=False), keep it until they are. Left
        # until the function returns, it would still be alive when the collector is
        # enabled again, and the first allocation after that would traverse all of it
        # in a young-generation collection (~0.1 s of the 60k cycle) only to free it next.
        del cycle
    finally:
        if gc_was_enabled:
            gc.enable()
    stats = dict(result.stats)
    stats["total_s"] = perf_counter() - t0
    object.__setattr__(result, "stats", stats)
    return result

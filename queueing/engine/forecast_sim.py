"""The forward simulation behind the ETAs: one run of the cycle in virtual time.

From a finished cycle's end state (:mod:`.forecast` builds the end events of the
running work), freed quota and nodes go to the waiting workloads in the cycle's order
and with its fit rules (quota chain, gang placement, Block/Intelligent blocking).
Simplifications, on purpose:

* preemption in virtual time is the cycle's, simplified (:func:`.forecast_preempt.preempt`):
  a candidate that does not fit takes lower-priority work of its own quota
  (``preempt_within_quota``) and -- within its quota's ``min`` -- work of quotas of its
  tree above their runtime quota (``reclaim``), lowest priority and latest end first,
  sparing work due to end within ``preempt_grace_s`` and work admitted by age ahead
  of the preemptor (:func:`.aging.admitted_by_age_ahead`, judged at its virtual start),
  and taking another quota's work only while it borrows and no min breaks; it starts a cycle after its
  queue's next victim search (one per queue and quota per cycle). Victims release at
  once and are not simulated again; at most ``MAX_SIM_PREEMPTIONS`` searches per run;
* each queue looks ``eta_max_depth`` candidates ahead (or its ``max_depth``), not
  counting work that waits behind its quota's blocked head (it gets no turn, as in
  the cycle: filled with it, the look-ahead never reached another quota's work);
* runtime quota is recomputed every so many completions, not at each one; when a
  completion leaves its quota's demand below its runtime quota while work waits for
  quota (the difference goes to the siblings: a gang larger than its quota's share
  starts when a sibling's work ends -- kept at the cycle's split, the demo's 16-GPU
  gangs were forecast to wait for their aging bound, 270 s, and started after 90 s);
  and when an aged head's claim becomes whole (:mod:`.forecast_aging`), with the
  claims of that time as the cycle splits it: a head whose claim is whole may start
  on capacity already idle. Between those instants claims do not grow (recomputing
  at every instant while heads claim cost 2-3 times the simulation's CPU on a 14k
  world and forecast gpu-heavy no better). Between splits, a quota whose demand fell
  below its share is ranked by what it still asks (:func:`.forecast_split.keep_shares`).
  An aged workload of a queue whose policy
  does not block holds its quota's room once it fails (as
  ``Cycle.hold_aged``), at the start and in virtual time;
* the cycle's reservations for its waiting preemptors are held again (``holds``),
  each given back to its own preemptor while it is looked at; a preemptor that
  awaits its victims in virtual time holds what it needs beyond them the same way;
  no other preemptor takes the work it awaits, and its hold grows as that work
  ends, to all it needs beyond what still runs (as the cycle reserves it again);
* preempted victims and requeued workloads release at once; victims compete again
  with their original order; a waiting preemptor fits by the runtime quota without
  aged claims (``limit_base``: preemption judged it by that, and claims stay frozen
  while it waits) -- by the claimed limit it was forecast minutes late in gpu-heavy
  and started within one cycle;
* a running workload past its estimate is assumed to need a quarter (p50) or half
  (p90) of the estimate more; past the typical share of a declared limit, it ends
  between now and the limit (half way at the median);
* every workload runs its p50 or p90 runtime (``q``), or, in the p50's draws
  (:func:`.forecast.forecast`), the runtime it drew -- one run sees one draw;
* in the p50's draws, work like the recent arrivals arrives at its rate
  (:mod:`.forecast_arrivals`), seen by the next cycle; such a draw ends once every
  waiting workload has started;
* with ``cycle_interval_s``, what ends between two cycles is admitted at the next;
* completions within 2 % of their lead time are released together (an ETA two
  hours out is good to about two minutes).

The cost is bounded: the simulation stops at ``now + eta_horizon_s`` and when its
share of ``eta_budget_s`` is spent; workloads not admitted by then get no time and a
reason (:mod:`.eta`).

To stay cheap, the simulation starts from what the cycle learnt: a candidate that
failed on nodes, or whose quota is still short, is *filed* under what blocks it and
looked at again only when that changes (:mod:`.forecast_filing`); each queue's
window of candidates is filled as :mod:`.forecast_window` says. Within one instant,
failed gang shapes are memoised (capacity only shrinks until the next release).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import TYPE_CHECKING

from queueing.engine.cyclestate import (
    F_NEVER,
    QueueState,
    order_key,
    runtime_of,
)
from queueing.engine.fairshare import FairShare
from queueing.engine.forecast_aging import age, claims_at, passes_hold_at, wake_behind
from queueing.engine.forecast_arrivals import Arrival, arrive, spawn
from queueing.engine.forecast_filing import file_cand, wake_nodes, wake_quota
from queueing.engine.forecast_preempt import (
    MAX_SIM_PREEMPTIONS,
    Awaiting,
    awaiting_at_start,
    drop_awaiting,
    preempt,
    preempt_deferred,
    rewatch,
    victim_ended,
    watch_reclaim,
)
from queueing.engine.forecast_split import (
    any_usable,
    keep_shares,
    requota,
    surplus_helps,
    unused_share,
)
from queueing.engine.forecast_window import PARK_BUDGET, SimCand, SimQueue, fill
from queueing.engine.holds import nonpreemptible_short
from queueing.engine.nodes import EligKey, NodeIndex
from queueing.engine.types import PREEMPTED, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["OVERDUE_FACTOR", "Event", "Simulation", "runtime_of"]

#: Share of the expected runtime a running workload still needs once past it.
OVERDUE_FACTOR = (0.25, 0.5)
#: Completions this close (relative to how far ahead they are) are released together.
RESOLUTION = 0.02
#: How many candidates the simulation examines between two looks at the clock.
_CLOCK_EVERY = 64


#: (time, sequence, quota index, workload, what it holds per node index or None to
#: read it from the workload's assignment at release).
Event = tuple[float, int, int, WorkloadSpec, "dict[int, dict[str, int]] | None"]


class Simulation:
    """One forward run (p50 or p90) of the cycle in virtual time."""

    cand_type = SimCand
    queue_type = SimQueue

    def __init__(
        self,
        cy: Cycle,
        q: int,
        events: list[Event],
        deadline: float,
        draw: Callable[[WorkloadSpec], float] | None = None,
        arrivals: list[Arrival] | None = None,
    ) -> None:
        self.cy = cy
        self.q = q
        #: How long a workload started in virtual time runs: its p50 or p90 runtime
        #: (``q``), or one draw of it (:func:`.forecast.forecast`'s Monte Carlo).
        self.draw = draw
        #: Work that arrives in virtual time, in time order (:mod:`.forecast_arrivals`),
        #: and how many of them have come.
        self.arrivals: list[Arrival] = arrivals or []
        self.arrived = 0
        #: With arrivals: how many of them have started, and how many waiting
        #: workloads the run forecasts (it ends once all of those have started: what
        #: the arrivals do after that changes no forecast).
        self.arrivals_started = 0
        self.to_forecast = -1
        self.deadline = deadline
        cfg = cy.config
        self.now = cy.now
        #: The virtual time of the admission round under way (aging's tier in ``_key``).
        self.t = cy.now
        #: Per (queue, quota), the aged candidate that goes first in this round.
        self.jumped: dict[tuple[int, int], int] = {}
        self.end = cy.now + max(0.0, cfg.eta_horizon_s)
        self.depth = max(1, cfg.eta_max_depth)
        self.tree = cy.tree
        self.nodes: NodeIndex = cy.nodes.clone()
        # The simulation starts from true usage, then holds the cycle's reservations
        # for its waiting preemptors again (``CycleState.reservations``, at ``setup``):
        # each is given back while its own preemptor is looked at, and for good once
        # it starts. Without them the room a preemptor awaits went to work behind it
        # at once: forecast to start now, that work waited for the preemptor's end
        # (the demo: a 1-GPU job "in 0 s" for a minute beside "short by 1 GPU").
        self.used = [dict(u) for u in cy.used]
        self.holds = {
            wid: (r.held, r.take) for wid, r in cy.reservations.items() if wid in cy.waiting
        }
        self.held: set[int] = set()
        #: Running work a waiting preemptor awaits (it ends within the grace period):
        #: victim id -> that preemptor. No other preemptor's victim search takes it, as
        #: in the cycle (``Preemptor.awaited``): its room is already spoken for. And
        #: per such preemptor, what its hold is made from: the hold grows as each of
        #: them ends (:func:`.forecast_preempt.victim_ended`), as the cycle reserves
        #: again, each cycle, all it needs beyond the victims still running.
        self.awaited: dict[int, int] = {}
        self.awaits: dict[int, Awaiting] = {}
        self.np_used = [dict(u) for u in cy.np_used]
        self.own_demand = [dict(d) for d in cy.own_demand]
        self.runtime = cy.runtime
        self.limit = cy.limit
        # A waiting preemptor was judged by the runtime quota without aged claims, and
        # claims stay frozen while it waits: it fits by that limit, as in the cycle.
        self.limit_base = cy.limit_base
        self.events = events
        self.seq = len(events) + 1
        self.eta: dict[int, float] = {}
        #: Waiting workloads that asked more than their quota could get at the cycle
        #: while its siblings' demand held their mins (``CycleState.unusable_ids``):
        #: they take no share of the weights until that demand falls (``_requota``).
        self.unusable_ws: list[tuple[int, WorkloadSpec]] = list(cy.unusable_ws)
        #: What waits behind those of them that block their quota in their queue.
        self.unusable_behind = cy.unusable_behind
        #: The quotas whose demand falling may let one of them fit: its chain's
        #: siblings (each level's mins are held for their demand).
        self.unusable_near: set[int] = set()
        tree = cy.tree
        for qi in {qi for qi, _ in self.unusable_ws}:
            for c in tree.chains[qi]:
                p = tree.parent[c]
                if p >= 0:
                    self.unusable_near.update(tree.children[p])
        self.fair = self._fair()
        self.qheap: list[tuple[tuple[int, int, float, int, float, int], int]] = []
        self.quota_files: dict[tuple[int, str], list[tuple[int, int, int, SimCand]]] = {}
        self.node_files: dict[tuple[EligKey, str], list[tuple[int, int, int, SimCand]]] = {}
        self.node_keys: dict[int, list[tuple[EligKey, str]]] = {}
        self.failed_shapes: set[object] = set()
        self.node_how: dict[object, tuple[tuple[EligKey, str], int] | None] = {}
        self.queues: list[SimQueue] = []
        self.by_name: dict[str, SimQueue] = {}
        self.examined = 0
        self.out_of_time = False
        self.park_left = PARK_BUDGET
        # Preemption in virtual time: what runs, per quota (id -> (workload, what it
        # holds per node or None, end time)); evicted ids whose end events are void.
        self.running: dict[
            int, dict[int, tuple[WorkloadSpec, dict[int, dict[str, int]] | None, float]]
        ] = {}
        self.evicted: set[int] = set()
        #: When each workload started in virtual time (what preemption spares by age).
        self.started: dict[int, float] = {}
        self.preempt_failed: set[tuple[int, int, object]] = set(cy.preempt_failed)
        #: Per quota, candidates that may reclaim once that quota is back within its
        #: min (they asked no more than it): looked at again when its usage falls
        #: (:func:`.forecast_preempt.rewatch`), where filing alone would wait for room to free.
        self.reclaim_watch: dict[int, list[SimCand]] = {}
        self.preempts_left = MAX_SIM_PREEMPTIONS
        #: With waiting preemptors in the cycle, the candidates that may preempt at the
        #: start do so once those have started (:func:`.forecast_preempt.preempt_deferred`):
        #: before, one could take the room of their victims, counted free already.
        self.defer_preempts: list[tuple[SimQueue, SimCand]] | None = [] if cy.waiting else None
        #: Evicted workloads queued again (:func:`.forecast_preempt.preempt`).
        self.requeued = 0
        self.next_search: dict[tuple[int, int], float] = {}
        #: (time its next workload ages, queue index), built at the first step.
        self.age_heap: list[tuple[float, int]] | None = None
        #: Aged claims in virtual time: modelled when any queue ages (the cycle's
        #: own claims are in ``limit`` at the start); ``claim_times``: when a head's
        #: claim becomes whole (a heap).
        self.claims_mode = any(q.spec.aging_bound_s is not None for q in cy.queues)
        self.claim_times: list[float] = []
        self.claim_seen: set[float] = set()
        tick = cfg.cycle_interval_s
        self.tick = tick if tick > 0 else 1.0

    def _fair(self) -> FairShare:
        cy = self.cy
        cfg = cy.config
        return FairShare(
            cfg.fair_share_mode,
            cfg.blend_alpha,
            cfg.usage_half_life_s,
            cfg.entry_penalty_s,
            self.runtime,
            self.used,
            cy.fair.ledger,
            cy.tree.fair_weight,
        )

    # -- setup -----------------------------------------------------------------------

    def setup(self) -> None:
        cy = self.cy
        nindex = self.nodes.index
        for at, _, qi, w, held in self.events:
            if qi >= 0 and w.preemptible:
                self.running.setdefault(qi, {})[w.id] = (w, held, at)
        requeued = {r.workload_id for r in cy.requeues}
        victims = cy.victim_ids
        back: dict[str, list[WorkloadSpec]] = {}
        for qi, ws in enumerate(cy.holding):
            for w in ws:
                if w.phase == PREEMPTED or w.id in victims or w.id in requeued:
                    # Evicted (or being requeued): capacity comes back at once.
                    self._release(qi, w, None, demand=True)
                    if w.id in victims and w.queue in cy.queue_specs:
                        back.setdefault(w.queue, []).append(w)
                        d = self.own_demand[qi]
                        for k, v in w._request._d.items():
                            d[k] = d.get(k, 0) + v
        for a, w in zip(cy.admissions, cy.admitted_ws, strict=True):
            per_node = {nindex[n]: dict(r.raw) for n, r in a.assignment.items()}
            self._start(self.now, cy.quota_of[w.id], w, per_node)
        for wid in self.holds:
            self._hold(wid)
        admitted = cy.admitted_ids
        states = {q.spec.name: q for q in cy.queues}
        for name in sorted(set(states) | set(back)):
            state = states.get(name) or QueueState(-1, cy.queue_specs[name], [])
            ws = state.cands  # admitted ones are skipped as the window fills
            if name in back:
                ws = sorted([w for w in ws if w.id not in admitted] + back[name], key=order_key)
            self.queues.append(SimQueue(len(self.queues), state, ws))
            self.by_name[name] = self.queues[-1]
        if cy.awaiting:
            awaiting_at_start(self)

    def _hold(self, wid: int) -> None:
        """Hold the room the cycle reserved for waiting preemptor ``wid``."""
        self._holding(wid, 1)
        self.held.add(wid)

    def _unhold(self, wid: int) -> None:
        """Give back the room held for ``wid`` (:meth:`_hold`)."""
        self._holding(wid, -1)
        self.held.discard(wid)

    def _holding(self, wid: int, sign: int) -> None:
        quotas, take = self.holds[wid]
        used = self.used
        for c, amounts in quotas.items():
            u = used[c]
            for k, v in amounts.items():
                u[k] = u.get(k, 0) + sign * v
        if take:
            if sign > 0:
                self.nodes.commit(take)
            else:
                self.nodes.release(take)

    def _quota_fail(
        self,
        qi: int,
        req: Mapping[str, int],
        limit: list[dict[str, int]] | None = None,
        w: WorkloadSpec | None = None,
    ) -> tuple[int, str]:
        used = self.used
        if limit is None:
            limit = self.limit
        for node_q in self.tree.chains[qi]:
            u = used[node_q]
            lim = limit[node_q]
            for k, v in req.items():
                if u.get(k, 0) + v > lim.get(k, 0):
                    return node_q, k
        if w is not None and not w.preemptible:
            # The cycle's rule for a non-preemptible workload (within its quota's min).
            k = nonpreemptible_short(self.tree.mins[qi], self.np_used[qi], req)
            if k:
                return qi, k
        return -1, ""

    def _release(
        self,
        qi: int,
        w: WorkloadSpec,
        per_node: dict[int, dict[str, int]] | None,
        *,
        demand: bool,
        into: dict[int, dict[str, int]] | None = None,
    ) -> set[int]:
        """Give back what ``w`` held; node capacity goes to ``into`` when batching."""
        req = w._request._d
        if qi >= 0:
            for c in self.tree.chains[qi]:
                u = self.used[c]
                for k, v in req.items():
                    u[k] = u.get(k, 0) - v
                if not w.preemptible:
                    npu = self.np_used[c]
                    for k, v in req.items():
                        npu[k] = npu.get(k, 0) - v
            if demand:
                d = self.own_demand[qi]
                for k, v in req.items():
                    d[k] = d.get(k, 0) - v
        if per_node is None:
            nindex = self.nodes.index
            per_node = {}
            for n, r in w.assignment.items():
                i = nindex.get(n)
                if i is not None:
                    per_node[i] = dict(r.raw)
        if per_node:
            if into is None:
                self.nodes.release(per_node)
            else:
                for i, amount in per_node.items():
                    acc = into.get(i)
                    if acc is None:
                        into[i] = dict(amount)
                    else:
                        for k, v in amount.items():
                            acc[k] = acc.get(k, 0) + v
        return set(per_node)

    # -- the run ---------------------------------------------------------------------

    def run(self) -> dict[int, float]:
        if perf_counter() > self.deadline:
            self.out_of_time = True
            return self.eta
        self.setup()
        for sq in self.queues:
            fill(self, sq, initial=True)
            self._schedule(sq)
        if self.defer_preempts is not None:
            self._admit_round(self.now)  # the waiting preemptors go first
            preempt_deferred(self, self.now)
        if self.claims_mode:
            claims_at(self, self.now)  # when the heads' claims become whole
        if self.arrivals:
            fail = self.cy.fail
            admitted = self.cy.admitted_ids
            self.to_forecast = sum(
                1
                for sq in self.queues
                for w in sq.ws
                if w.id not in admitted and (fail.get(w.id) or (0,))[0] != F_NEVER
            )
        t = self.now
        n_running = len(self.events)
        recompute_every = max(64, n_running // 4)
        since = 0
        tree = self.tree
        while True:
            self._admit_round(t)
            if self.out_of_time or not (self.events or self.claim_times):
                break
            if len(self.eta) - self.arrivals_started >= self.to_forecast >= 0:
                break  # every waiting workload has started: only arrivals are left
            if perf_counter() > self.deadline:
                # Stopped by its budget, not its horizon: the reason must say which.
                self.out_of_time = True
                break
            if self.arrived < len(self.arrivals):
                # Work arrives before anything ends or a claim becomes whole: the next
                # cycle sees it (beyond the horizon, it never comes).
                ta = self._tick(self.arrivals[self.arrived][0])
                if ta > self.end:
                    self.arrived = len(self.arrivals)
                elif ta < min(
                    self._tick(self.events[0][0]) if self.events else math.inf,
                    self._tick(self.claim_times[0]) if self.claim_times else math.inf,
                ):
                    t = ta
                    if self._arrive_until(t):
                        self._requota(t)
                        wake_quota(self, set(self.quota_files))
                    age(self, t)
                    continue
            if self.claim_times and (not self.events or self.claim_times[0] < self.events[0][0]):
                # No work ends before an aged head's claim becomes whole: the runtime
                # quota moves then, and the head may start on capacity already idle.
                t = heapq.heappop(self.claim_times)
                # Claims that become whole within RESOLUTION of the lead time are
                # looked at together, as releases are (one split of the runtime quota).
                window = t + RESOLUTION * (t - self.now)
                while self.claim_times and self.claim_times[0] <= window:
                    t = heapq.heappop(self.claim_times)
                tick = self.cy.config.cycle_interval_s
                if tick > 0:  # seen by the next cycle
                    t = self.now + math.ceil((t - self.now) / tick - 1e-9) * tick
                if t > self.end:
                    break
                age(self, t)
                self._arrive_until(t)
                self._requota(t)
                wake_quota(self, set(self.quota_files))
                continue
            t = self.events[0][0]
            if t > self.end:
                break
            # Completions within RESOLUTION of the lead time are released together: a
            # 2 % error on "in two hours" buys one admission pass instead of dozens.
            window = t + RESOLUTION * (t - self.now)
            tick = self.cy.config.cycle_interval_s
            if tick > 0:
                # Cycles run every ``tick``: what ends between two of them is admitted
                # at the next one, all at once.
                t = self.now + math.ceil((t - self.now) / tick - 1e-9) * tick
                window = max(window, t)
            touched_q: set[tuple[int, str]] = set()
            touched_n: set[int] = set()
            fell: set[int] = set()  # quotas whose usage fell
            # The (quota, resource) pairs whose demand fell with these ends: what of its
            # runtime quota the quota no longer uses the split hands to its siblings
            # (a quota short of room may start now).
            ended: set[tuple[int, str]] = set()
            freed: dict[int, dict[str, int]] = {}
            awaited_ended: list[int] = []
            while self.events and self.events[0][0] <= window:
                at, _, qi, w, held = heapq.heappop(self.events)
                if w.id in self.evicted:
                    self.evicted.discard(w.id)
                    continue
                if w.id in self.awaited:
                    awaited_ended.append(w.id)
                if qi >= 0:
                    got = self.running.get(qi)
                    if got is not None:
                        got.pop(w.id, None)
                t = max(t, at)
                if qi >= 0:
                    for k in w._request._d:
                        ended.add((qi, k))
                touched_n |= self._release(qi, w, held, demand=True, into=freed)
                if qi >= 0:
                    for c in tree.chains[qi]:
                        fell.add(c)
                        for k in w._request._d:
                            touched_q.add((c, k))
                since += 1
            if freed:
                self.nodes.release(freed)
            for vid in awaited_ended:
                victim_ended(self, vid)
            came = self._arrive_until(window)
            surplus = unused_share(self, ended)
            self.failed_shapes.clear()  # capacity grew: old failures may fit now
            self.preempt_failed.clear()
            if (
                came
                or since >= recompute_every
                or (surplus and surplus_helps(self, surplus))
                or (
                    self.unusable_ws
                    and not fell.isdisjoint(self.unusable_near)
                    and any_usable(self)
                )
            ):
                # Every so many completions, with the claims of that time (they grow
                # with their heads' waits and lapse as the heads start); when a quota's
                # demand fell below its share while work waits for quota (the share
                # goes to its siblings: a gang short of its runtime quota starts when a
                # sibling's work ends, not when its claim is whole); and when demand
                # that could not use its share can now (a sibling's demand fell below
                # its min): the split moves then, as the cycle's would.
                since = 0
                self._requota(t)
                touched_q = set(self.quota_files)
            elif surplus:
                keep_shares(self, surplus)
            wake_quota(self, touched_q)
            wake_nodes(self, touched_n)
            wake_behind(self, fell)
            if self.reclaim_watch:
                rewatch(self, fell)
            age(self, t)
        return self.eta

    def _tick(self, t: float) -> float:
        """When the cycle that sees what happens at ``t`` runs."""
        tick = self.cy.config.cycle_interval_s
        if tick > 0:
            return self.now + math.ceil((t - self.now) / tick - 1e-9) * tick
        return t

    def _arrive_until(self, t: float) -> bool:
        """What arrives by ``t`` enters its queue (:func:`.forecast_arrivals.arrive`);
        whether any of it may move the runtime quota's split: it entered a quota whose
        runtime quota covered its demand (the cycle splits again with that demand; a
        quota held at its share by the water level gains nothing by more)."""
        arrivals = self.arrivals
        index = self.tree.index
        runtime = self.runtime
        demand = self.own_demand
        moved = False
        while self.arrived < len(arrivals) and arrivals[self.arrived][0] <= t:
            at, tpl, _ = arrivals[self.arrived]
            qi = index.get(tpl.quota, -1)
            below = (
                not moved
                and qi >= 0
                and any(runtime[qi].get(k, 0) >= demand[qi].get(k, 0) for k in tpl._request._d)
            )
            if arrive(self, spawn(self.arrived, at, tpl)) and below:
                moved = True
            self.arrived += 1
        return moved

    def _requota(self, t: float) -> None:
        """Runtime quota (and fair share) for the state at ``t`` (:func:`.forecast_split.requota`)."""
        requota(self, t)

    def _key(self, sq: SimQueue, c: SimCand) -> tuple[int, int, float, int, float, int]:
        if c.first:
            return (-(2**62), 0, -math.inf, -c.w.priority, c.w.queue_order_at, c.w.id)
        # The first aged candidate of each queue and quota in a round goes before work
        # that has not aged, the oldest first, as the cycle's tournament orders them.
        tier = self._tier(sq, c)
        return (
            -sq.state.spec.priority,
            tier,
            c.w.queue_order_at
            if not tier
            else self.fair.score(c.qi, c.req)
            if c.qi >= 0
            else math.inf,
            -c.w.priority,
            c.w.queue_order_at,
            c.w.id,
        )

    def _tier(self, sq: SimQueue, c: SimCand) -> int:
        if not self._aged_at(sq, c.w, self.t):
            return 1
        key = (sq.index, c.qi)
        got = self.jumped.setdefault(key, c.w.id)
        return 0 if got == c.w.id else 1

    def _schedule(self, sq: SimQueue) -> None:
        if sq.in_heap:
            return
        while sq.dirty and sq.dirty[0] not in sq.cands:
            heapq.heappop(sq.dirty)  # moved by age, or gone
        if sq.dirty:
            c = sq.cands[sq.dirty[0]]
            heapq.heappush(self.qheap, (self._key(sq, c), sq.index))
            sq.in_heap = True

    def refill(self, sq: SimQueue) -> None:
        """Top the queue's window up (:func:`.forecast_window.fill`) and look at it."""
        fill(self, sq)
        self._schedule(sq)

    def _mark(self, c: SimCand) -> None:
        c.filed = False
        sq = self.queues[c.queue]
        heapq.heappush(sq.dirty, c.idx)
        self._schedule(sq)

    def _admit_round(self, t: float) -> None:
        self.t = t
        self.jumped.clear()
        qheap = self.qheap
        queues = self.queues
        if len(qheap) > 1:
            # Each round is a cycle, whose tournament ranks afresh. A queue woken
            # between rounds was keyed with the last round's time and its record of
            # which aged job went first (a key is checked only for being too early):
            # demo seed 8's aged large-213 went third, after two later jobs.
            stale = [qidx for _, qidx in qheap]
            qheap.clear()
            for qidx in stale:
                queues[qidx].in_heap = False
            for qidx in stale:
                self._schedule(queues[qidx])
        nodes = self.nodes
        eta = self.eta
        cy = self.cy
        failed_shapes = self.failed_shapes
        deadline = self.deadline
        while qheap:
            self.examined += 1
            if self.examined % _CLOCK_EVERY == 0 and perf_counter() > deadline:
                self.out_of_time = True
                return
            key, qidx = heapq.heappop(qheap)
            sq = queues[qidx]
            sq.in_heap = False
            if not sq.dirty:
                continue
            i = heapq.heappop(sq.dirty)
            c = sq.cands.get(i)
            if c is None or c.w.id in eta or c.qi < 0:
                self._schedule(sq)
                continue
            w = c.w
            if not c.first:
                now_key = self._key(sq, c)
                if now_key > key:
                    heapq.heappush(sq.dirty, i)
                    heapq.heappush(qheap, (now_key, qidx))
                    sq.in_heap = True
                    continue
            qi = c.qi
            b = sq.block_at.get(qi)
            # A waiting preemptor is not held behind its queue's blocked head: the
            # cycle looks at preemptors before the queues (``Cycle.admit_nominated``).
            if b is not None and b < i and not c.first and not passes_hold_at(self, sq, qi, b, c):
                self._park(sq, c, qi, i)
                fill(self, sq)
                self._schedule(sq)
                continue
            req = c.req
            own = w.id in self.held
            if own:
                # Its own reserved room is its to use: given back while it is looked at
                # (and failed shapes forgotten: the nodes have more room for now).
                self._unhold(w.id)
                failed_shapes.clear()
            fail_c, fail_k = self._quota_fail(qi, req, self.limit_base if c.first else None, w)
            placed = None
            if fail_c < 0:
                shape = cy.shape(w)
                if shape not in failed_shapes:
                    placed = nodes.place(cy.reqs(w))
                    if placed is None:
                        failed_shapes.add(shape)
            if placed is not None:
                drop_awaiting(self, w.id)
                self._take(qi, w, req, placed.per_node)
                eta[w.id] = t
                self._start(t, qi, w, dict(placed.per_node))
                self._admitted(sq, i, qi)
            elif not c.first and self._preempt(sq, c, t, fail_c):
                self._admitted(sq, i, qi)
            else:
                if own:
                    self._hold(w.id)
                if sq.state.blocks(w):
                    if b is None or i < b:
                        sq.block_at[qi] = i
                elif not c.first and qi not in sq.aged_heads and self._aged_at(sq, w, t):
                    # The first aged workload of its quota to fail holds its room in a
                    # queue whose policy does not block (Cycle.hold_aged): short of
                    # quota, the work of its quota behind it waits.
                    sq.aged_heads[qi] = w.id
                    if fail_c >= 0 and (b is None or i < b):
                        sq.block_at[qi] = i
                file_cand(self, c, fail_c, fail_k)
                if not c.first:
                    watch_reclaim(self, sq, c)
            self._schedule(sq)

    @staticmethod
    def _aged_at(sq: SimQueue, w: WorkloadSpec, t: float) -> bool:
        bound = sq.state.spec.aging_bound_s
        return bound is not None and w.queue_order_at <= t - max(0.0, bound)

    def _admitted(self, sq: SimQueue, i: int, qi: int) -> None:
        c = sq.cands.pop(i)
        sq.window -= 1
        if sq.aged_heads.get(qi) == c.w.id:
            del sq.aged_heads[qi]  # the next aged workload of its quota may hold
        if sq.block_at.get(qi) == i:
            del sq.block_at[qi]
            for j in sq.behind.pop(qi, []):
                behind = sq.cands.get(j)
                if behind is not None:
                    self.unpark(sq, behind)
                heapq.heappush(sq.dirty, j)
        fill(self, sq)

    def _park(self, sq: SimQueue, c: SimCand, qi: int, i: int) -> None:
        """``c`` waits behind its quota's blocked head: out of the look-ahead (while
        the run's allowance lasts, see ``forecast_window.PARK_BUDGET``)."""
        sq.behind.setdefault(qi, []).append(i)
        if not c.parked and self.park_left > 0:
            self.park_left -= 1
            c.parked = True
            sq.window -= 1

    @staticmethod
    def unpark(sq: SimQueue, c: SimCand) -> None:
        """``c`` is looked at again: back in the look-ahead."""
        if c.parked:
            c.parked = False
            sq.window += 1

    def _take(
        self,
        qi: int,
        w: WorkloadSpec,
        req: Mapping[str, int],
        per_node: Mapping[int, Mapping[str, int]],
    ) -> None:
        """Count an admission in virtual time: usage along its quota chain (and the
        non-preemptible usage), fair share, and its place on the nodes."""
        used = self.used
        for node_q in self.tree.chains[qi]:
            u = used[node_q]
            for k, v in req.items():
                u[k] = u.get(k, 0) + v
            if not w.preemptible:
                npu = self.np_used[node_q]
                for k, v in req.items():
                    npu[k] = npu.get(k, 0) + v
        self.fair.admitted(qi, req)
        self.nodes.commit(per_node)

    def _start(
        self, t: float, qi: int, w: WorkloadSpec, per_node: dict[int, dict[str, int]]
    ) -> None:
        """``w`` starts at ``t`` holding ``per_node``: its end is an event."""
        draw = self.draw
        end = t + (runtime_of(self.cy, w, self.q) if draw is None else draw(w))
        if w.id < 0:
            self.arrivals_started += 1
        self.seq += 1
        heapq.heappush(self.events, (end, self.seq, qi, w, per_node))
        if qi >= 0 and w.preemptible:
            self.running.setdefault(qi, {})[w.id] = (w, per_node, end)
            self.started[w.id] = t

    def _preempt(self, sq: SimQueue, c: SimCand, t: float, fail_c: int) -> bool:
        """Whether ``c`` gets in by preempting (:func:`.forecast_preempt.preempt`)."""
        return preempt(self, sq, c, t, fail_c)

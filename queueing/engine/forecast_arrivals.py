"""Arrivals in the forward simulation: work that does not exist yet, drawn from history.

A waiting workload's start depends on what arrives while it waits: a higher-priority
job goes ahead of it in its queue, a small one takes the hole a gang needed (the demo's
large-36, forecast at +50 s with every actual runtime known, started at +156 s after 58
later arrivals had started, many in the holes it needed). The simulation alone knows
only the work that exists. In the p50's draws (:func:`.forecast._median_starts`) each
run also replays arrivals like the recent ones (``Snapshot.recent_arrivals``): per
queue, a Poisson stream at the rate seen over ``Snapshot.arrival_span_s``, each arrival
a copy of one of that queue's recent workloads picked at random, with a runtime drawn
from its law. The streams run ``REPLAY_S`` ahead (as long as the history they are read
from, ten minutes: ``calibration.HISTORY_S``), at most ``MAX_ARRIVALS`` a run; a
history whose streams would bring more is a flood, left to the busy-period stretch of
:mod:`.eta` (cut short, it read as a burst that ends at once). Within that horizon
each draw's inflow lasts its own quantile of Gott's law for an inflow seen as long as
the system has seen arrivals (``Snapshot.arrival_age_s``, :func:`inflow_lasts`): as
long again at the median. A young system's first minute is no ten-minute inflow; an
hour-old one replays nearly all of the horizon. (The flood test still counts the
whole horizon: Kueue's first seconds, 160 jobs a second, are a flood whatever their
age.)

An arrival enters its queue at its place in the queue's order (priority, then time) as
the cycle after it would see it, and its request into its quota's demand. One that
lands beyond the queue's look-ahead (``eta_max_depth`` candidates) waits outside it, in
its place, and comes in when the window reaches it, before the waiting workload it
landed ahead of. (Left out, as it was, it was lost to every workload behind it:
Kueue's baseline, whose queues hold hundreds of jobs, lost some 380 medium jobs of a
cohort that way, and its small jobs started 17 s early, told every arrival.)
A start after the streams end (or after ``MAX_ARRIVALS`` cut a draw's) has not seen
every arrival before it: :mod:`.eta` stretches the rest of such a wait (after the
streams' end) by the arrivals' load, as it does without draws. Two arrivals between
the same two waiting workloads are in the queue's order too (priority, then time;
not, as they once were, in the order they came). Each draw's streams are its own and
the same at every cycle, seeded by the draw's index: from one cycle to the next only
the history moves them, not the dice.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from queueing.engine.aging import OrderKey, queue_order_key
from queueing.engine.calibration import HISTORY_S
from queueing.engine.cyclestate import QueueState
from queueing.engine.forecast_aging import SPACE
from queueing.engine.types import PENDING, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle
    from queueing.engine.forecast_sim import Simulation

__all__ = [
    "MAX_ARRIVALS",
    "Arrival",
    "arrival_id",
    "arrive",
    "draw_arrivals",
    "history",
    "inflow_lasts",
    "replayable",
    "spawn",
]

#: At most this many arrivals in one run (their cost: each is one more candidate).
MAX_ARRIVALS = 512
#: How far ahead the streams run (s): as long as the history they are read from. The
#: demo's waits run to about six minutes; with five-minute streams the longer ones fell
#: back to the busy-period stretch, which knows a load, not which work goes first.
REPLAY_S = HISTORY_S

#: The fields of an arrival's rank among the arrivals between two waiting workloads
#: (:func:`_rank`): a priority (Kubernetes' are 32-bit), milliseconds since the
#: epoch, how many came before it; with the aged bit, 95 bits, within ``SPACE - 2``.
_PRIO_BITS = 32
_PRIO_HALF = 1 << (_PRIO_BITS - 1)
_TIME_BITS = 42
_N_BITS = 20

#: (time it arrives, the workload it is a copy of, the runtime it drew)
Arrival = tuple[float, WorkloadSpec, float]


def history(cy: Cycle) -> dict[str, list[WorkloadSpec]]:
    """Per queue, the recent arrivals the forecast can replay: those of a queue and a
    quota this cycle knows. None (an empty history) when their streams would bring
    more than ``MAX_ARRIVALS`` a draw: a flood is left to the busy-period stretch
    (:mod:`.eta`), as without a history -- cut short, it read as a burst that ends at
    once (Kueue's baseline, 160 jobs a second)."""
    snap = cy.snapshot
    if not snap.recent_arrivals or snap.arrival_span_s <= 0:
        return {}
    never_nodes: dict[object, bool] = {}
    out: dict[str, list[WorkloadSpec]] = {}
    for w in snap.recent_arrivals:
        if replayable(cy, w, never_nodes):
            out.setdefault(w.queue, []).append(w)
    expected = sum(map(len, out.values())) * _replay_s(cy) / snap.arrival_span_s
    return {} if expected > MAX_ARRIVALS else out


def replayable(cy: Cycle, w: WorkloadSpec, never_nodes: dict[object, bool]) -> bool:
    """Whether ``w`` arriving would compete in this cycle's world: of a queue and a
    quota it knows, asking for something, and not one that can never fit (beyond a
    max on its quota's chain, the cluster, or every node: the cycle sets such work
    aside and it blocks nobody). ``never_nodes``: a memo per gang shape."""
    tree = cy.tree
    qi = tree.index.get(w.quota)
    if w.queue not in cy.queue_specs or qi is None or not w.pod_sets:
        return False
    capacity = cy.nodes.capacity
    if any(
        v > min([capacity.get(k, 0), *(tree.maxes[x].get(k, v) for x in tree.chains[qi])])
        for k, v in w._request._d.items()
    ):
        return False
    shape = cy.shape(w)
    never = never_nodes.get(shape)
    if never is None:
        never = never_nodes[shape] = cy.nodes.never_fits(cy.reqs(w)) is not None
    return not never


def _replay_s(cy: Cycle) -> float:
    return min(REPLAY_S, max(0.0, cy.config.eta_horizon_s))


def draw_arrivals(
    cy: Cycle,
    past: dict[str, list[WorkloadSpec]],
    j: int,
    runtime: Callable[[WorkloadSpec, float], float],
    lasts: float = 0.5,
) -> tuple[list[Arrival], float]:
    """Draw ``j``'s arrivals, in time order: per queue a Poisson stream at the rate of
    ``past`` over the snapshot's span, each one of them to copy (:func:`spawn`), whose
    runtime is ``runtime(template, u)`` for a uniform ``u``; and until when
    they are the whole stream (earlier than its end when ``MAX_ARRIVALS`` cut it: a
    start after that time saw only part of what arrives before it).

    The inflow lasts, in this draw, its quantile ``lasts`` of Gott's law
    (:func:`inflow_lasts`): a stream that ends before the horizon is still all that
    arrives in this draw."""
    now = cy.now
    span = cy.snapshot.arrival_span_s
    until = now + _replay_s(cy)
    end = min(until, now + inflow_lasts(cy.snapshot.arrival_age_s, lasts))
    rng = random.Random(j * 0x9E3779B1 + 0x2545F491)
    out: list[Arrival] = []
    for name in sorted(past):
        ws = past[name]
        rate = len(ws) / span
        t = now
        while True:
            t += rng.expovariate(rate)
            if t > end:
                break
            tpl = ws[rng.randrange(len(ws))]
            out.append((t, tpl, runtime(tpl, rng.random())))
    out.sort(key=lambda a: a[0])
    if len(out) > MAX_ARRIVALS:
        until = out[MAX_ARRIVALS][0]
        del out[MAX_ARRIVALS:]
    return out, until


def inflow_lasts(age_s: float, u: float) -> float:
    """How much longer an inflow seen for ``age_s`` lasts, at quantile ``u`` of Gott's
    law (J. R. Gott, Nature 363, 1993: what has lasted ``t`` lasts more than ``x`` with
    probability ``t / (t + x)``): ``age_s (1 / (1 - u) - 1)``, ``age_s`` at the median.
    A system's first minute (the demo's first wave, read at 0.6 jobs a second into one
    queue) is no ten-minute inflow: replayed as one, the low-priority work of that
    queue was forecast at its aging bound, 300 s, and started in 4-48 s."""
    if u >= 1.0 or math.isinf(age_s):
        return math.inf
    return max(0.0, age_s) * (1.0 / (1.0 - u) - 1.0)


def arrival_id(k: int) -> int:
    """The id of the ``k``-th arrival (from 0) of a draw: negative, no workload's."""
    return -(k + 1)


def spawn(k: int, t: float, tpl: WorkloadSpec) -> WorkloadSpec:
    """The ``k``-th arrival of a draw: a waiting copy of ``tpl`` queued at ``t``, made
    only when the simulation reaches it (most of a draw's streams come after every
    waiting workload has started, and are never made)."""
    return waiting_copy(tpl, arrival_id(k), t)


def waiting_copy(tpl: WorkloadSpec, wid: int, t: float) -> WorkloadSpec:
    """A waiting copy of ``tpl`` under id ``wid``, queued at ``t``."""
    w = WorkloadSpec(
        id=wid,
        name=tpl.name,
        quota=tpl.quota,
        queue=tpl.queue,
        priority=tpl.priority,
        queue_order_at=t,
        pod_sets=tpl.pod_sets,
        phase=PENDING,
        expected_runtime_s=tpl.expected_runtime_s,
        preemptible=tpl.preemptible,
    )
    # Same pod sets, same placer's view (it is made once per spec, and costly).
    object.__setattr__(w, "_placer", tpl._placer)
    return w


def _rank(key: OrderKey, n: int) -> int:
    """An arrival's place among the arrivals that land between the same two waiting
    workloads of its queue: its order key as one integer (aged first, then priority,
    then the time it queued, to the millisecond, then the order it came in, ``n``).
    In the order they came, a job that arrived later but of higher priority went
    after one that arrived earlier: the cycle ran a 1-GPU job of llm ahead of a gang
    requeued before it, whose aged claim the simulation served instead (gpu-heavy
    seed 20: gpu-1-124, 300 s in fact, 1,270 s told everything)."""
    aged, neg_priority, at, _ = key
    prio = min(max(neg_priority + _PRIO_HALF, 0), 2 * _PRIO_HALF - 1)
    ms = min(max(int(at * 1000.0), 0), (1 << _TIME_BITS) - 1)
    return (((aged << _PRIO_BITS | prio) << _TIME_BITS | ms) << _N_BITS) | min(
        n, (1 << _N_BITS) - 1
    )


def arrive(sim: Simulation, w: WorkloadSpec) -> bool:
    """``w`` enters its queue in the simulation, and its demand its quota's; False
    when it is left out (of a queue or quota the cycle does not know). Beyond the
    queue's look-ahead it waits outside the window, in its place, until the window
    reaches it (:func:`.forecast_window.fill`)."""
    cy = sim.cy
    qi = cy.tree.index.get(w.quota, -1)
    if qi < 0:
        return False
    sq = sim.by_name.get(w.queue)
    if sq is None:
        spec = cy.queue_specs.get(w.queue)
        if spec is None:
            return False
        sq = sim.queue_type(len(sim.queues), QueueState(-1, spec, [], cy.now), [])
        sim.queues.append(sq)
        sim.by_name[w.queue] = sq
    keys = sq.keys
    if keys is None:
        key = queue_order_key(sq.state.spec, cy.now)
        keys = sq.keys = [key(x) for x in sq.ws]
    mine = queue_order_key(sq.state.spec, cy.now)(w)
    p = bisect.bisect_right(keys, mine)
    sq.arrived += 1
    i = (p << SPACE) - (1 << (SPACE - 2)) + _rank(mine, sq.arrived)
    c = sim.cand_type(w, qi, sq.index, i, False)
    d = sim.own_demand[qi]
    for k, v in c.req.items():
        d[k] = d.get(k, 0) + v
    if p < sq.nxt:
        # Within the window.
        sq.cands[i] = c
        sq.window += 1
        sim._mark(c)
    else:
        # Beyond it: it waits in its place and comes in when the window reaches it.
        heapq.heappush(sq.later, (i, c))
        sim.refill(sq)
    return True

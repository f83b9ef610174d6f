"""Each queue's look-ahead in the forward simulation (:mod:`.forecast_sim`).

The simulation looks at a queue's waiting workloads as the cycle does, through a
window: ``eta_max_depth`` candidates ahead (or the queue's ``max_depth``), in queue
order. :func:`fill` tops the window up as its candidates start or are set aside. Work
that waits behind its quota's blocked head is *parked*: it does not count toward the
look-ahead (it gets no turn, as in the cycle: filled with it, the look-ahead never
reached another quota's work). At the start, the window reuses what the cycle learnt:
a candidate the cycle failed to place, or whose quota is still short, is filed
(:mod:`.forecast_filing`) rather than looked at again at once.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING

from queueing.engine.aging import OrderKey
from queueing.engine.cyclestate import F_NEVER, F_NODES, QueueState
from queueing.engine.forecast_aging import SPACE, passes_hold_at
from queueing.engine.forecast_filing import file_cand
from queueing.engine.forecast_preempt import watch_reclaim
from queueing.engine.types import WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.forecast_sim import Simulation

__all__ = ["PARK_BUDGET", "SimCand", "SimQueue", "fill"]

#: Work parked behind a blocked head does not count toward a queue's look-ahead (as in
#: the cycle); one fill parks at most ``_PARK_SCAN`` workloads and one run at most
#: ``PARK_BUDGET`` (its cost: scanning past parked work cost the 60k world's forecast
#: 50 ms unbounded), the rest counts toward the look-ahead as before.
_PARK_SCAN = 32
PARK_BUDGET = 1024


class SimCand:
    """A waiting workload inside the simulation's window of its queue."""

    __slots__ = ("filed", "first", "idx", "parked", "qi", "queue", "req", "w")

    def __init__(self, w: WorkloadSpec, qi: int, queue: int, idx: int, first: bool) -> None:
        self.w = w
        self.qi = qi
        self.queue = queue
        self.idx = idx  # position in its queue's list
        self.first = first  # a waiting preemptor: goes before everyone
        self.req: Mapping[str, int] = w._request._d
        self.filed = False
        #: Waiting behind its quota's blocked head (``SimQueue.behind``): it does not
        #: use the queue's look-ahead, as in the cycle.
        self.parked = False


class SimQueue:
    """A queue in the simulation: its waiting workloads, the window over them, and
    what blocks or waits in it."""

    __slots__ = (
        "aged_base",
        "aged_heads",
        "aged_n",
        "ages",
        "arrived",
        "behind",
        "block_at",
        "cands",
        "dirty",
        "in_heap",
        "index",
        "keys",
        "later",
        "moved",
        "nxt",
        "state",
        "window",
        "ws",
    )

    def __init__(self, index: int, state: QueueState, ws: list[WorkloadSpec]) -> None:
        self.index = index
        self.state = state
        self.ws = ws  # waiting workloads in queue order
        self.cands: dict[int, SimCand] = {}  # list index -> candidate (the window)
        self.nxt = 0  # next list index not yet in the window
        self.window = 0  # candidates in the window, not admitted
        self.dirty: list[int] = []  # heap of list indices to (re)check
        self.in_heap = False
        self.block_at: dict[int, int] = {}  # quota -> index of a failing blocking head
        self.behind: dict[int, list[int]] = {}  # quota -> indices waiting for that head
        self.ages: list[tuple[float, int]] | None = None  # (queued at, list index), heap
        self.aged_base = 0
        self.aged_n = 0
        self.moved: set[int] = set()  # list indices brought into the window by age
        #: quota -> id of its aged head that failed (``QueueState.aged_heads``): the
        #: one workload of the quota in this queue that holds room for itself.
        self.aged_heads: dict[int, int] = dict(state.aged_heads)
        #: Arrivals in virtual time (:mod:`.forecast_arrivals`): how many entered, and
        #: the order keys of ``ws`` they are placed by (made at the first).
        self.arrived = 0
        self.keys: list[OrderKey] | None = None
        #: Arrivals that landed beyond the window, (index, candidate), a heap: each
        #: comes into the window when the window reaches its place in the queue's
        #: order (before the waiting workload it landed ahead of).
        self.later: list[tuple[int, SimCand]] = []


def fill(sim: Simulation, sq: SimQueue, *, initial: bool = False) -> None:
    """Bring candidates into the queue's window, filed or dirty.

    At the start, what the cycle learnt is reused: a candidate it failed to place
    waits for nodes, one whose quota is still short waits for that quota node, one
    behind a failing Block/Intelligent head, or behind an aged head that holds its
    quota unless it passes that hold (:func:`.forecast_aging.passes_hold_at`),
    waits for that head. Such a candidate may get in by preempting at once -- after
    the cycle's waiting preemptors have taken the room of their victims, when there
    are any (``Simulation.defer_preempts``).
    """
    cy = sim.cy
    depth = sim.depth
    spec_depth = sq.state.spec.max_depth
    if spec_depth > 0:
        depth = min(depth, spec_depth)
    quota_of = cy.quota_of
    qindex = cy.tree.index
    waiting = cy.waiting
    fail = cy.fail
    blocks = sq.state.blocks
    admitted = cy.admitted_ids
    ws = sq.ws
    n = len(ws)
    later = sq.later
    parked = 0
    while sq.window < depth and (sq.nxt < n or later) and parked < _PARK_SCAN:
        if later and (sq.nxt >= n or later[0][0] < sq.nxt << SPACE):
            # An arrival that landed here, beyond the window when it came.
            i, c = heapq.heappop(later)
            sq.window += 1
            sq.cands[i] = c
            heapq.heappush(sq.dirty, i)
            continue
        li = sq.nxt
        w = ws[li]
        sq.nxt += 1
        if w.id in admitted or li in sq.moved:
            continue
        i = li << SPACE
        f0 = fail.get(w.id)
        if f0 is not None and f0[0] == F_NEVER:
            continue
        sq.window += 1
        qi = quota_of.get(w.id)
        if qi is None:
            qi = qindex.get(w.quota, -1)
        c = SimCand(w, qi, sq.index, i, w.id in waiting)
        sq.cands[i] = c
        if initial and not c.first:
            b = sq.block_at.get(qi)
            if b is not None and not passes_hold_at(sim, sq, qi, b, c):
                sim._park(sq, c, qi, i)
                parked += 1
                continue
            f = fail.get(w.id)
            if f is not None and f[0] == F_NODES:
                # The cycle just failed to place it; it waits for nodes to free up
                # -- unless it gets in by preempting at one of the next cycles.
                if sim.defer_preempts is not None:
                    sim.defer_preempts.append((sq, c))
                elif sim._preempt(sq, c, sim.now, -1):
                    del sq.cands[i]
                    sq.window -= 1
                    continue
                file_cand(sim, c, -1, "")
                watch_reclaim(sim, sq, c)
                if blocks(w):
                    sq.block_at[qi] = i
                continue
            fc, fk = sim._quota_fail(qi, c.req, w=w)
            if fc >= 0:
                if sim.defer_preempts is not None:
                    sim.defer_preempts.append((sq, c))
                elif sim._preempt(sq, c, sim.now, fc):
                    del sq.cands[i]
                    sq.window -= 1
                    continue
                file_cand(sim, c, fc, fk)
                watch_reclaim(sim, sq, c)
                # A strict-order head blocks its quota's work behind it; so does the
                # aged head of a Priority queue short of quota that the cycle made
                # hold its quota's room (Cycle.hold_aged: it is the quota's blocker).
                if blocks(w) or sq.state.blocked.get(qi) == w.id:
                    sq.block_at[qi] = i
                continue
        heapq.heappush(sq.dirty, i)

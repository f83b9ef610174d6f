"""A virtual-time simulator: the real engine over a scenario, without a cluster.

Workloads arrive at their creation times. When a cycle runs depends on ``cycle``:

* ``"interval"`` -- every ``cycle_interval_s`` of virtual time, as beat's timer does;
* ``"on-event"`` -- as the event-driven cycle does: an arrival, a completion or a
  confirmed eviction wakes a cycle ``debounce_s`` later, and events inside that window
  are served by the same cycle; ``cycle_interval_s`` is then beat's safety net (a
  cycle at least that often while anything waits).

Each cycle builds a :class:`~.types.Snapshot`, calls :func:`~.cycle.run_cycle` and
applies the decisions the way the database side does:

* an admission starts the workload at once; it finishes after its runtime;
* a preempted victim keeps holding its capacity until the next cycle (the cluster
  confirming the eviction), then returns to Pending with its original queue-order
  time; its runtime starts over when it is admitted again (as in Kueue's runner);
* ``nominations`` are fed back as ``WorkloadSpec.nominated``;
* the usage ledger is charged between cycles (:func:`~.ledger.charge`), so the
  default ``blended`` fair share sees history as in production.

Metrics follow Kueue's performance recorder: usage is integrated from admission to
finish (or eviction) per quota; ``avg_usage_pct`` is the total usage over the sum of
the queues' nominal quotas (``min``) times the run, ``min_queue_usage_pct`` the lowest
per-queue figure; time to admission is measured to the *last* admission of a workload
(a workload evicted and re-admitted counts the second time), like Kueue's recorder.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter, process_time
from typing import Any, Protocol

from queueing.engine import ledger as ledger_mod
from queueing.engine.cycle import run_cycle
from queueing.engine.invariants import check_cycle
from queueing.engine.resources import Resources
from queueing.engine.types import (
    CycleResult,
    EngineConfig,
    NodeSpec,
    QueueSpec,
    QuotaNode,
    Snapshot,
    WorkloadSpec,
)

__all__ = [
    "CYCLE_MODES",
    "Arrival",
    "CycleObserver",
    "InvariantBroken",
    "Scenario",
    "SimResult",
    "Unfinished",
    "next_cycle_at",
    "simulate",
]


class InvariantBroken(AssertionError):
    """A simulated cycle broke a quota invariant (``simulate(invariants=True)``)."""


class Unfinished(RuntimeError):
    """A simulated run passed ``max_virtual_s`` with work still to do; ``waiting``: the
    workloads not running then (pending or evicted), ``running``: those still running,
    ``last``: the last cycle's snapshot and result."""

    def __init__(
        self,
        scenario: str,
        waiting: Sequence[WorkloadSpec],
        running: Sequence[WorkloadSpec],
        last: tuple[Snapshot, CycleResult] | None = None,
    ) -> None:
        names = ", ".join(w.name for w in waiting[:5]) + (" ..." if len(waiting) > 5 else "")
        super().__init__(
            f"simulation of {scenario!r} did not finish in virtual time"
            + (f" ({len(waiting)} waiting: {names})" if waiting else "")
        )
        self.waiting = tuple(waiting)
        self.running = tuple(running)
        self.last = last


#: When cycles run: on beat's timer, or woken by events (debounced).
CYCLE_MODES = ("interval", "on-event")


class CycleObserver(Protocol):
    """Watches every cycle of a simulated run (e.g. :class:`~.calibration.EtaRecorder`).

    ``before`` may return an amended snapshot (what the database side would add from
    its memory: earlier ETAs, measured errors); ``after`` sees the decisions.
    """

    def before(self, snap: Snapshot) -> Snapshot: ...

    def after(self, snap: Snapshot, result: CycleResult) -> None: ...


@dataclass(frozen=True, slots=True)
class Arrival:
    """A workload created at ``at`` (virtual seconds) that runs ``runtime_s`` once admitted."""

    at: float
    workload: WorkloadSpec
    klass: str
    runtime_s: float


@dataclass(frozen=True, slots=True)
class Scenario:
    """Quotas, queues, nodes and the arrivals of one simulated run."""

    name: str
    quotas: tuple[QuotaNode, ...]
    queues: tuple[QueueSpec, ...]
    nodes: tuple[NodeSpec, ...]
    arrivals: tuple[Arrival, ...]
    #: The quotas whose usage is reported (Kueue's ClusterQueues), with their nominal.
    measured: dict[str, int] = field(default_factory=dict)
    #: The resource usage is measured in.
    resource: str = "cpu"


@dataclass(slots=True)
class SimResult:
    """What a simulated run measured."""

    scenario: str
    makespan_s: float
    avg_usage_pct: float
    min_queue_usage_pct: float
    tta_mean_s: dict[str, float]
    tta_first_mean_s: dict[str, float]
    evictions: int
    cycles: int
    cycle_interval_s: float
    cycle_mode: str
    debounce_s: float
    engine_mean_s: float
    engine_max_s: float
    wall_s: float
    queue_usage_pct: dict[str, float]
    engine_p95_s: float = 0.0
    admissions_per_cycle_max: int = 0
    engine_cpu_mean_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        r = 3
        return {
            "scenario": self.scenario,
            "makespan_s": round(self.makespan_s, r),
            "avg_usage_pct": round(self.avg_usage_pct, 2),
            "min_queue_usage_pct": round(self.min_queue_usage_pct, 2),
            "tta_mean_s": {k: round(v, r) for k, v in sorted(self.tta_mean_s.items())},
            "tta_first_mean_s": {k: round(v, r) for k, v in sorted(self.tta_first_mean_s.items())},
            "evictions": self.evictions,
            "cycles": self.cycles,
            "cycle_interval_s": self.cycle_interval_s,
            "cycle": self.cycle_mode,
            "debounce_s": self.debounce_s,
            "engine_mean_s": round(self.engine_mean_s, 4),
            "engine_max_s": round(self.engine_max_s, 4),
            "engine_p95_s": round(self.engine_p95_s, 4),
            "admissions_per_cycle_max": self.admissions_per_cycle_max,
            "engine_cpu_mean_s": round(self.engine_cpu_mean_s, 4),
            "wall_s": round(self.wall_s, 2),
        }


def next_cycle_at(
    mode: str,
    last: float,
    *,
    interval_s: float,
    debounce_s: float,
    next_event: float | None,
    ticking: bool,
) -> float | None:
    """When the cycle after the one at ``last`` runs, or ``None`` if nothing ever wakes it.

    ``next_event`` is the earliest event a cycle has not seen yet (an arrival, a
    completion, or -- at ``last`` itself -- an eviction to confirm); ``ticking`` says
    whether beat's timer has anything to find. In ``"interval"`` mode cycles run on
    the grid of ``interval_s`` and skip the idle stretch before the next arrival; in
    ``"on-event"`` mode the event wakes a cycle ``debounce_s`` later, and beat's
    tick ``interval_s`` after the last cycle comes first if no event does.
    """
    if mode == "interval":
        if ticking:
            return last + interval_s
        if next_event is None:
            return None
        return max(last + interval_s, math.ceil(next_event / interval_s) * interval_s)
    if mode != "on-event":
        raise ValueError(f"unknown cycle mode {mode!r}; expected one of {CYCLE_MODES}")
    woken = None if next_event is None else next_event + debounce_s
    beat = last + interval_s if ticking else None
    candidates = [t for t in (woken, beat) if t is not None]
    return min(candidates) if candidates else None


def simulate(
    scenario: Scenario,
    *,
    cycle_interval_s: float = 1.0,
    cycle: str = "interval",
    debounce_s: float = 0.02,
    config: EngineConfig | None = None,
    epoch: float = 1_700_000_000.0,
    max_virtual_s: float = 24 * 3600.0,
    observer: CycleObserver | None = None,
    invariants: bool = False,
) -> SimResult:
    """Run ``scenario`` through the engine in virtual time and measure it.

    ``cycle`` is one of :data:`CYCLE_MODES` (see the module's docstring);
    ``debounce_s`` is the on-event mode's wake-up delay. ``epoch`` is added to
    virtual times to make snapshot clocks look like epoch seconds; results are
    reported relative to the start (t = 0). With an ``observer`` the cycles also
    forecast (positions, ETAs), and the observer sees each snapshot and result.
    With ``invariants`` every cycle's decisions are checked against the quota
    invariants (:func:`~.invariants.check_cycle`) and the first break raises
    :class:`InvariantBroken`.
    """
    if cycle not in CYCLE_MODES:
        raise ValueError(f"unknown cycle mode {cycle!r}; expected one of {CYCLE_MODES}")
    if cycle_interval_s <= 0 or debounce_s < 0:
        raise ValueError("cycle_interval_s must be positive and debounce_s not negative")
    wall0 = perf_counter()
    cfg = config or EngineConfig()
    res = scenario.resource
    arrivals = sorted(scenario.arrivals, key=lambda a: (a.at, a.workload.id))
    runtime_of = {a.workload.id: a.runtime_s for a in arrivals}
    klass_of = {a.workload.id: a.klass for a in arrivals}
    created = {a.workload.id: a.at for a in arrivals}
    first_admit: dict[int, float] = {}
    last_admit: dict[int, float] = {}
    pending: dict[int, WorkloadSpec] = {}
    running: dict[int, WorkloadSpec] = {}
    preempted: dict[int, WorkloadSpec] = {}
    finish_heap: list[tuple[float, int, int]] = []  # (finish time, id, admission serial)
    serial: dict[int, int] = {}
    used: dict[str, int] = defaultdict(int)  # measured quota -> units in use
    usage_int: dict[str, float] = defaultdict(float)  # quota -> unit-seconds
    last_change = 0.0
    ledger: dict[str, dict[str, float]] = {}
    last_ledger_t = 0.0
    evictions = 0
    cycles = 0
    engine_times: list[float] = []
    most_admitted = 0
    engine_cpu = 0.0  # CPU seconds: unlike wall time, not inflated by a loaded machine
    flagged: set[int] = set()  # pending workloads whose nominated flag is set
    makespan = 0.0
    next_arrival = 0
    n_arrivals = len(arrivals)
    measured = scenario.measured

    def integrate(now: float) -> None:
        nonlocal last_change
        dt = now - last_change
        if dt > 0:
            for q, u in used.items():
                if u:
                    usage_int[q] += u * dt
        last_change = now

    def hold(w: WorkloadSpec, sign: int) -> None:
        if w.quota in measured:
            used[w.quota] += sign * w.request.get(res, 0)

    def next_event() -> float | None:
        """The earliest arrival, completion or eviction to confirm not yet seen by a cycle."""
        # Finish entries of evicted workloads are void: drop them so they wake nothing.
        while finish_heap and serial.get(finish_heap[0][1]) != finish_heap[0][2]:
            heapq.heappop(finish_heap)
        times = [finish_heap[0][0]] if finish_heap else []
        if next_arrival < n_arrivals:
            times.append(arrivals[next_arrival].at)
        if preempted:
            times.append(t)
        return min(times) if times else None

    t = 0.0
    last: tuple[Snapshot, CycleResult] | None = None
    while True:
        if cycle == "interval":
            # Completions are seen only at a tick: the timer runs while anything runs.
            upcoming = arrivals[next_arrival].at if next_arrival < n_arrivals else None
            t_next = next_cycle_at(
                cycle,
                t,
                interval_s=cycle_interval_s,
                debounce_s=debounce_s,
                next_event=upcoming,
                ticking=bool(pending or preempted or running),
            )
        else:
            t_next = next_cycle_at(
                cycle,
                t,
                interval_s=cycle_interval_s,
                debounce_s=debounce_s,
                next_event=next_event(),
                ticking=bool(pending),
            )
        if t_next is None:
            break
        t = t_next
        if t > max_virtual_s:
            raise Unfinished(
                scenario.name,
                [*pending.values(), *preempted.values()],
                list(running.values()),
                last,
            )
        # Completions up to t, in time order.
        while finish_heap and finish_heap[0][0] <= t:
            at, wid, ser = heapq.heappop(finish_heap)
            w = running.get(wid)
            if w is None or serial.get(wid) != ser:
                continue  # evicted since
            integrate(at)
            hold(w, -1)
            del running[wid]
            makespan = max(makespan, at)
        integrate(t)
        while next_arrival < n_arrivals and arrivals[next_arrival].at <= t:
            arr = arrivals[next_arrival]
            pending[arr.workload.id] = arr.workload
            next_arrival += 1
        # The cluster confirms last cycle's evictions.
        for wid, w in preempted.items():
            hold(w, -1)
            pending[wid] = dataclasses.replace(
                w,
                phase="Pending",
                assignment={},
                preempted_by=None,
                admitted_at=None,
                started_at=None,
                attempts=w.attempts + 1,
            )
        preempted.clear()
        if not pending:
            continue
        # Charge the ledger for the interval since the last cycle.
        elapsed = t - last_ledger_t
        if elapsed > 0:
            by_quota: dict[str, dict[str, int]] = defaultdict(dict)
            for w in running.values():
                d = by_quota[w.quota]
                for k, v in w.request.items():
                    d[k] = d.get(k, 0) + v
            for q in set(ledger) | set(by_quota):
                ledger[q] = ledger_mod.charge(
                    ledger.get(q, {}), by_quota.get(q, {}), elapsed, cfg.usage_half_life_s
                )
            last_ledger_t = t
        snap = Snapshot(
            now=epoch + t,
            quotas=scenario.quotas,
            queues=scenario.queues,
            workloads=(*pending.values(), *running.values()),
            nodes=scenario.nodes,
            ledger=ledger,
            config=cfg,
        )
        if observer is not None:
            snap = observer.before(snap)
        c0, p0 = perf_counter(), process_time()
        result = run_cycle(snap, forecast=observer is not None)
        last = (snap, result)
        engine_times.append(perf_counter() - c0)
        engine_cpu += process_time() - p0
        if observer is not None:
            observer.after(snap, result)
        if invariants:
            broken = check_cycle(snap, result)
            if broken:
                raise InvariantBroken(f"cycle at t={t:.3f}: " + "; ".join(broken))
        cycles += 1
        most_admitted = max(most_admitted, len(result.admissions))
        # Apply.
        nominated = set(result.nominations)
        awaiting = set(result.awaiting)
        for adm in result.admissions:
            w = pending.pop(adm.workload_id)
            w = dataclasses.replace(
                w,
                phase="Running",
                assignment=dict(adm.assignment),
                admitted_at=epoch + t,
                started_at=epoch + t,
                nominated=False,
                awaiting=False,
            )
            running[w.id] = w
            hold(w, 1)
            first_admit.setdefault(w.id, t)
            last_admit[w.id] = t
            serial[w.id] = serial.get(w.id, 0) + 1
            heapq.heappush(finish_heap, (t + runtime_of[w.id], w.id, serial[w.id]))
            ledger[w.quota] = ledger_mod.entry_penalty(
                ledger.get(w.quota, {}), w.request, cfg.entry_penalty_s
            )
        for p in result.preemptions:
            w = running.pop(p.victim_id)
            serial[w.id] = serial.get(w.id, 0) + 1  # its finish event is void now
            # Still holding (usage counted) until the eviction is confirmed.
            preempted[w.id] = dataclasses.replace(w, phase="Preempted", preempted_by=p.preemptor_id)
            evictions += 1
        # Set aside as inadmissible (never fits as specified): out of the run, as a
        # user would delete it; it would wait for ever otherwise.
        for wid, e in result.explanations.items():
            if e.kind == "never-fits" and wid in pending:
                del pending[wid]
        # Only flags that change: a scan of every pending workload per cycle would cost
        # more than the engine at 10x.
        for wid in flagged | nominated:
            w = pending.get(wid)
            if w is not None and (w.nominated, w.awaiting) != (
                wid in nominated,
                wid in awaiting,
            ):
                pending[wid] = dataclasses.replace(
                    w, nominated=wid in nominated, awaiting=wid in awaiting
                )
        flagged = nominated
    integrate(makespan)
    span = makespan if makespan > 0 else 1.0
    queue_pct = {
        q: 100.0 * usage_int[q] / (nominal * span) if nominal else 0.0
        for q, nominal in sorted(measured.items())
    }
    total_nominal = sum(measured.values())
    avg = (
        100.0 * sum(usage_int[q] for q in measured) / (total_nominal * span)
        if total_nominal
        else 0.0
    )

    def means(source: dict[int, float]) -> dict[str, float]:
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for wid, at in source.items():
            k = klass_of[wid]
            sums[k] += at - created[wid]
            counts[k] += 1
        return {k: sums[k] / counts[k] for k in sums}

    return SimResult(
        scenario=scenario.name,
        makespan_s=makespan,
        avg_usage_pct=avg,
        min_queue_usage_pct=min(queue_pct.values()) if queue_pct else 0.0,
        tta_mean_s=means(last_admit),
        tta_first_mean_s=means(first_admit),
        evictions=evictions,
        cycles=cycles,
        cycle_interval_s=cycle_interval_s,
        cycle_mode=cycle,
        debounce_s=debounce_s,
        engine_mean_s=sum(engine_times) / len(engine_times) if engine_times else 0.0,
        engine_max_s=max(engine_times, default=0.0),
        wall_s=perf_counter() - wall0,
        queue_usage_pct=queue_pct,
        engine_p95_s=(
            sorted(engine_times)[min(len(engine_times) - 1, round(0.95 * (len(engine_times) - 1)))]
            if engine_times
            else 0.0
        ),
        admissions_per_cycle_max=most_admitted,
        engine_cpu_mean_s=engine_cpu / cycles if cycles else 0.0,
    )


def single_node(name: str, capacity: Resources) -> tuple[NodeSpec, ...]:
    """One node holding the whole capacity: quota, not placement, is what is measured."""
    return (NodeSpec(name, capacity),)

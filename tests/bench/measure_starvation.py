"""Starvation and usage over the demo worlds in virtual time (issue 11, item 6).

Not a `make bench` benchmark (no ``bench_`` prefix): run it before and after an engine
change, `.venv/bin/python -m tests.bench.measure_starvation [WORLD ...]`, where a WORLD
is ``demo``, ``demo-waves`` or ``gpu-heavy`` with options ``:minutes=45:seed=2`` (demo
worlds) or ``:seed=12`` (gpu-heavy), ``:interval=2`` (the cycle, seconds) and ``:cycle=on-event``
(cycles woken by events, as the live system runs them; default ``interval``) and
``:history=1`` (what the live system remembers between cycles: runtime shares and the
forecast's measured errors, ``EtaRecorder.before``; default off). One JSON
line per world: the longest wait of a feasible workload (from arrival or eviction to
admission; still waiting at the end counts to the end; workloads set aside as never
fitting are left out), how many waits passed 300 and 600 s, the five longest, the
cluster's usage (allocated / allocatable, stepwise at cycles) over the arrivals' window
-- all cpu, all GPUs, and the cpu pool of the demo (its 16 cpu nodes: 496 cpu, where
cpu-only work runs) -- the quota invariants checked in every cycle, and aging's bound
("starts by T at the latest"): workloads admitted after the first / the last bound
stated for them (a cycle's slack), and of those, the *broken* bounds: admitted late
while still stating it the cycle before (nothing joined its queue ahead of it, the
condition the sentence names); and how often a bound moved later from one cycle to
the next (the bound counts every workload holding capacity in its root's tree, so
each admission of longer work anywhere in that tree moves it).

And "min unused" (issue 11's "done when": no queue waits with its guaranteed minimum
unused), as ``observe_demo`` defines it live: a queue and quota whose competing
workload (a strict-order queue's head, in the engine's queue order; any in a
best-effort queue; an Intelligent queue's up to the first at its threshold) asks no
more than the quota's min minus what it holds and is not nominated, for at least
``MIN_UNUSED_S`` and ``MIN_UNUSED_CYCLES`` cycles: a *break*. Each break is classified
from the last cycle of its stretch (:class:`MinUnused`): the head's explanation, and
on the nodes the head may use, how much is held by quotas above their min (borrowers)
and how much by quotas within it.
"""

from __future__ import annotations

import json
import sys
from time import perf_counter
from typing import Any

from queueing.engine.aging import order_key
from queueing.engine.calibration import EtaRecorder
from queueing.engine.invariants import check_cycle
from queueing.engine.nodes import NodeIndex, elig_key, podset_reqs
from queueing.engine.scenarios import demo_world, gpu_heavy
from queueing.engine.simulator import Scenario, simulate
from queueing.engine.types import CycleResult, EngineConfig, Snapshot

EPOCH = 1_700_000_000.0
GPU = "nvidia.com/gpu"
CPU_POOL_M = 16 * 31_000  # the demo's cpu nodes, allocatable
HOLDING = ("Running", "Admitted", "Preempted")
#: A "min unused" stretch is a break when it lasts this long and this many cycles
#: (``tests/bench/observe_demo.py``'s definition).
MIN_UNUSED_S = 30.0
MIN_UNUSED_CYCLES = 3


class MinUnused:
    """Queues waiting with their quota's guaranteed min unused, cycle by cycle.

    Fed every simulated cycle (:meth:`cycle`); :attr:`breaks` lists the stretches that
    lasted ``MIN_UNUSED_S`` and ``MIN_UNUSED_CYCLES`` cycles, with the head's
    explanation and who held its nodes at the last cycle of the stretch.
    """

    def __init__(self, sc: Scenario, epoch: float = EPOCH) -> None:
        self.epoch = epoch
        self.mins = {q.name: q.min.raw for q in sc.quotas}
        self.parent = {q.name: q.parent for q in sc.quotas}
        self.specs = {q.name: q for q in sc.queues}
        self.nodes = sc.nodes
        self.index = NodeIndex(sc.nodes)
        #: (queue, quota) -> [first t, cycles, head name, last classification]
        self.open: dict[tuple[str, str], list[Any]] = {}
        self.breaks: list[dict[str, Any]] = []
        self.candidate_cycles = 0
        self.cycles = 0
        self.last_t = 0.0

    def cycle(self, snap: Snapshot, result: CycleResult) -> None:
        t = snap.now - self.epoch
        self.cycles += 1
        self.last_t = t
        admitted = {a.workload_id for a in result.admissions}
        nominated = set(result.nominations)
        held: dict[str, dict[str, int]] = {}
        holders = []
        for w in snap.workloads:
            if w.phase in HOLDING or w.id in admitted:
                holders.append(w)
                h = held.setdefault(w.quota, {})
                for k, x in w.request.raw.items():
                    h[k] = h.get(k, 0) + x
        pending: dict[tuple[str, str], list] = {}
        for w in snap.workloads:
            if w.phase == "Pending" and w.id not in admitted and w.quota in self.mins:
                pending.setdefault((w.queue, w.quota), []).append(w)
        flagged: dict[tuple[str, str], Any] = {}
        for (qname, quota), waiting in pending.items():
            spec = self.specs.get(qname)
            bound = spec.aging_bound_s if spec else None
            waiting.sort(key=order_key(bound, snap.now))
            policy = spec.policy if spec else "Priority"
            if policy in ("Block", "FIFO"):
                competing = waiting[:1]
            elif policy == "Intelligent":
                competing = []
                for w in waiting:
                    competing.append(w)
                    if spec is not None and w.priority >= spec.priority_threshold:
                        break
            else:
                competing = waiting
            mn, used = self.mins[quota], held.get(quota, {})
            for w in competing:
                req = w.request.raw
                if w.id in nominated or not req:
                    continue
                if all(used.get(k, 0) + v <= mn.get(k, 0) for k, v in req.items()):
                    flagged[(qname, quota)] = w
                    break
        self.candidate_cycles += len(flagged)
        for key, w in flagged.items():
            run = self.open.setdefault(key, [t, 0, w.name, None])
            run[1] += 1
            run[2] = w.name
            run[3] = self._classify(w, result, held, holders)
        for key in list(self.open):
            if key not in flagged:
                self._close(key, t)

    def finish(self) -> None:
        for key in list(self.open):
            self._close(key, self.last_t)

    def _close(self, key: tuple[str, str], t: float) -> None:
        first, cycles, name, why = self.open.pop(key)
        if t - first >= MIN_UNUSED_S and cycles >= MIN_UNUSED_CYCLES:
            self.breaks.append(
                {
                    "queue": key[0],
                    "quota": key[1],
                    "at": round(first, 1),
                    "seconds": round(t - first, 1),
                    "cycles": cycles,
                    "head": name,
                    **why,
                }
            )

    def _over_min(self, held: dict[str, dict[str, int]], quota: str) -> bool:
        """Whether ``quota`` or an ancestor below the root uses more than its min."""
        at: str | None = quota
        while at is not None and self.parent.get(at) is not None:
            below: dict[str, int] = {}
            for q, h in held.items():
                x: str | None = q
                while x is not None and x != at:
                    x = self.parent.get(x)
                if x == at:
                    for k, v in h.items():
                        below[k] = below.get(k, 0) + v
            mn = self.mins.get(at, {})
            if any(v > mn.get(k, 0) for k, v in below.items() if k in mn):
                return True
            at = self.parent.get(at)
        return False

    def _chain(self, quota: str) -> list[str]:
        out: list[str] = []
        at: str | None = quota
        while at is not None:
            out.append(at)
            at = self.parent.get(at)
        return out

    def _victims(self, w, held, holders, keys: list[str]) -> dict[str, Any]:
        """Other quotas' work holding what ``w`` asks, as a reclaim would see it:
        borrowed (some quota on its path below the common ancestor above its min) and
        takeable (taking it leaves every such quota at or above its min, preemptible,
        and its priority allowed by the queue's reclaim policy), or why not."""
        mine = set(self._chain(w.quota))
        totals = {}
        for q in held:
            for a in self._chain(q):
                t = totals.setdefault(a, {})
                for k, v in held[q].items():
                    t[k] = t.get(k, 0) + v
        spec = self.specs.get(w.queue)
        policy = spec.reclaim if spec else "Any"
        out: dict[str, Any] = {"takeable": {}, "not_borrowed": 0}
        why: dict[str, int] = {}
        for v in holders:
            if v.quota in mine or not any(v.request.raw.get(k) for k in keys):
                continue
            path = [a for a in self._chain(v.quota) if a not in mine]
            borrowed = any(
                totals.get(a, {}).get(k, 0) > self.mins.get(a, {}).get(k, 0)
                for a in path
                for k in keys
            )
            if not borrowed:
                out["not_borrowed"] += 1
                continue
            reason = ""
            if not v.preemptible:
                reason = "non-preemptible"
            elif policy == "Never" or (policy == "LowerPriority" and v.priority >= w.priority):
                reason = f"policy {policy}"
            else:
                for a in path:
                    m = self.mins.get(a, {})
                    if any(
                        x and totals.get(a, {}).get(k, 0) - x < m.get(k, 0)
                        for k, x in v.request.raw.items()
                    ):
                        reason = f"would take {a} below its min"
                        break
            if reason:
                why[reason] = why.get(reason, 0) + 1
            else:
                t = out["takeable"]
                for k in keys:
                    t[k] = t.get(k, 0) + v.request.raw.get(k, 0)
        out["not_takeable"] = why
        return out

    def _classify(self, w, result: CycleResult, held, holders) -> dict[str, Any]:
        e = result.explanations.get(w.id)
        out: dict[str, Any] = {
            "kind": e.kind if e else None,
            "limit": e.limit if e else None,
            "sentence": e.sentence()[:300] if e else "",
        }
        names = self.index.names
        elig = {names[i] for ps in w.pod_sets for i in self.index.eligible(elig_key(ps))}
        keys = [k for k in w.request.raw if k in ("cpu", GPU)]
        by_borrowers: dict[str, int] = {}
        by_within: dict[str, int] = {}
        new = {a.workload_id: a.assignment for a in result.admissions}
        for v in holders:
            dest = by_borrowers if self._over_min(held, v.quota) else by_within
            for node, amount in new.get(v.id, v.assignment).items():
                if node in elig:
                    for k in keys:
                        if amount.raw.get(k):
                            dest[k] = dest.get(k, 0) + amount.raw[k]
        # Would its pods place on the nodes as they are held (no drain, no reservation)?
        free = NodeIndex(self.nodes)
        for v in holders:
            for node, amount in new.get(v.id, v.assignment).items():
                free.hold(node, amount.raw)
        out["fits_free_nodes"] = free.place(podset_reqs(w.pod_sets)) is not None
        out["on_its_nodes_borrowers"] = by_borrowers
        out["victims"] = self._victims(w, held, holders, keys)
        out["on_its_nodes_within_min"] = by_within
        return out


class Watch:
    """Waits, usage and invariant breaks, cycle by cycle."""

    def __init__(self, sc: Scenario, interval: float = 2.0) -> None:
        self.interval = interval
        self.start = {a.workload.id: a.at for a in sc.arrivals}
        self.name = {a.workload.id: (a.workload.name, a.workload.queue) for a in sc.arrivals}
        self.waits: list[tuple[float, int]] = []
        self.never: set[int] = set()
        self.cap = {"cpu": 0, GPU: 0}
        for n in sc.nodes:
            for k in self.cap:
                self.cap[k] += n.allocatable.get(k, 0) - n.reserved.get(k, 0)
        self.window = max(a.at for a in sc.arrivals)
        self.last_t: float | None = None
        self.last_used: dict[str, int] = {}
        self.int_win = {"cpu": 0.0, GPU: 0.0, "pool": 0.0}
        self.violations = 0
        self.min_unused = MinUnused(sc)
        #: Aging's bound ("starts by T at the latest"): per workload the first and last
        #: bound stated, and admissions after them (one cycle's slack).
        self.bounds: dict[int, list[float]] = {}
        self.bounded_admissions = 0
        self.after_first_bound = 0
        self.after_last_bound = 0
        self.late: list[tuple[str, int, int, int]] = []
        #: Bounds stated in the last cycle (the workload still the bounded head).
        self.bounded_now: dict[int, float] = {}
        self.broken_bounds: list[tuple[str, int, int]] = []
        #: How far a bound moved later from one cycle to the next (the head kept).
        self.moved_later: list[float] = []
        self.bounded_observations = 0

    def before(self, snap: Snapshot) -> Snapshot:
        return snap

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        t = snap.now - EPOCH
        self.violations += len(check_cycle(snap, result))
        self.min_unused.cycle(snap, result)
        if self.last_t is not None:
            lo, hi = self.last_t, min(t, self.window)
            if hi > lo:
                for k in self.int_win:
                    self.int_win[k] += self.last_used[k] * (hi - lo)
        used = {"cpu": 0, GPU: 0, "pool": 0}
        admitted = {a.workload_id for a in result.admissions}
        for w in snap.workloads:
            if w.phase in HOLDING or w.id in admitted:
                used["cpu"] += w.request.get("cpu", 0)
                used[GPU] += w.request.get(GPU, 0)
                if not w.request.get(GPU, 0):
                    used["pool"] += w.request.get("cpu", 0)
        self.last_t, self.last_used = t, used
        stated_before = self.bounded_now
        self.bounded_now = {}
        for wid, e in result.explanations.items():
            if e.starts_by is not None:
                b = self.bounds.setdefault(wid, [e.starts_by, e.starts_by])
                b[1] = e.starts_by
                self.bounded_now[wid] = e.starts_by
                self.bounded_observations += 1
                was = stated_before.get(wid)
                if was is not None and e.starts_by > was + self.interval:
                    self.moved_later.append(e.starts_by - was)
        for a in result.admissions:
            held = stated_before.get(a.workload_id)
            if held is not None and snap.now > held + self.interval:
                self.broken_bounds.append(
                    (self.name.get(a.workload_id, ("?",))[0], round(t), round(held - EPOCH))
                )
            b = self.bounds.pop(a.workload_id, None)
            if b is not None:
                self.bounded_admissions += 1
                self.after_first_bound += snap.now > b[0] + self.interval
                if snap.now > b[1] + self.interval:
                    self.after_last_bound += 1
                    self.late.append(
                        (
                            self.name.get(a.workload_id, ("?",))[0],
                            round(t),
                            round(b[0] - EPOCH),
                            round(b[1] - EPOCH),
                        )
                    )
            s = self.start.pop(a.workload_id, None)
            if s is not None:
                self.waits.append((t - s, a.workload_id))
        for p in result.preemptions:
            self.start[p.victim_id] = t
        for wid, e in result.explanations.items():
            if e.kind == "never-fits":
                self.never.add(wid)
                self.start.pop(wid, None)


class _WithHistory:
    """The watch, with what the live system remembers between cycles (runtime shares
    of declared runtimes, the forecast's measured errors: ``EtaRecorder.before``)."""

    def __init__(self, sc: Scenario, watch: Watch) -> None:
        self.watch = watch
        self.rec = EtaRecorder({a.workload.id: a.runtime_s for a in sc.arrivals})

    def before(self, snap: Snapshot) -> Snapshot:
        return self.rec.before(snap)

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        self.rec.after(snap, result)
        self.watch.after(snap, result)


def measure(
    sc: Scenario, interval: float = 2.0, cycle: str = "interval", history: bool = False
) -> dict[str, Any]:
    watch = Watch(sc, interval)
    t0 = perf_counter()
    sim = simulate(
        sc,
        cycle=cycle,
        cycle_interval_s=interval,
        config=EngineConfig(cycle_interval_s=interval, eta_budget_s=10.0),
        epoch=EPOCH,
        observer=_WithHistory(sc, watch) if history else watch,
    )
    end = sim.makespan_s
    watch.min_unused.finish()
    waits = [*watch.waits, *((end - s, wid) for wid, s in watch.start.items())]
    waits.sort(reverse=True)
    win = watch.window or 1.0

    def pct(x: float, cap: float) -> float:
        return round(100 * x / (cap * win), 2) if cap else 0.0

    return {
        "longest_wait_s": round(waits[0][0], 1) if waits else 0.0,
        "waits_over_600": sum(1 for x, _ in waits if x > 600),
        "waits_over_300": sum(1 for x, _ in waits if x > 300),
        "worst": [(round(x), *watch.name[i]) for x, i in waits[:5]],
        "usage_cpu_pct": pct(watch.int_win["cpu"], watch.cap["cpu"]),
        "usage_gpu_pct": pct(watch.int_win[GPU], watch.cap[GPU]),
        "usage_cpu_pool_pct": pct(watch.int_win["pool"], CPU_POOL_M),
        "makespan_s": round(end, 1),
        "evictions": sim.evictions,
        "invariant_violations": watch.violations,
        "bounded_admissions": watch.bounded_admissions,
        "admitted_after_first_bound": watch.after_first_bound,
        "admitted_after_last_bound": watch.after_last_bound,
        "late": watch.late,
        "broken_bounds": watch.broken_bounds,
        "bound_moves_later": len(watch.moved_later),
        "bound_moved_later_s": sorted(round(x) for x in watch.moved_later)[-5:],
        "bounded_observations": watch.bounded_observations,
        "min_unused_breaks": len(watch.min_unused.breaks),
        "min_unused_longest_s": max((b["seconds"] for b in watch.min_unused.breaks), default=0.0),
        "min_unused_candidate_cycles": watch.min_unused.candidate_cycles,
        "min_unused": watch.min_unused.breaks,
        "wall_s": round(perf_counter() - t0, 1),
    }


def world(spec: str) -> tuple[Scenario, float, str, bool]:
    name, *opts = spec.split(":")
    kw: dict[str, str] = dict(o.split("=", 1) for o in opts)
    interval = float(kw.pop("interval", "2"))
    cycle = kw.pop("cycle", "interval")
    history = kw.pop("history", "0") == "1"
    seed = int(kw.pop("seed")) if "seed" in kw else None
    if name == "gpu-heavy":
        sc = gpu_heavy(seed=seed) if seed is not None else gpu_heavy()
        return sc, interval, cycle, history
    minutes = float(kw.pop("minutes", "15"))
    waves = name == "demo-waves"
    if seed is not None:
        return demo_world(minutes, seed=seed, waves=waves), interval, cycle, history
    return demo_world(minutes, waves=waves), interval, cycle, history


if __name__ == "__main__":
    for spec in sys.argv[1:] or ["demo", "demo-waves", "gpu-heavy"]:
        sc, interval, cycle, history = world(spec)
        print(json.dumps({"world": spec, **measure(sc, interval, cycle, history)}), flush=True)

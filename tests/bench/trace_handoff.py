"""The hand-off of each finish, step by step, from ``KQ_TRACE`` lines and the fake log.

``python -m tests.bench.trace_handoff LOGS_DIR`` (``bench_e2e`` calls ``analyse`` itself
when ``KQ_TRACE`` is on): the processes' logs (``*.log``: the worker's and the watcher's
TRACE lines, queueing.trace) and the fake API server's entries (``fake.jsonl``).

For every job that finished while another job of its ClusterQueue was waiting, the
path to that queue's next unsuspension, as times after the finish:

- ``informer``: the first watch event (any process) that saw the job finished;
- ``wake``: the first react task sent after it;
- ``task``: the first task (react or tick) a worker picked up after that wake;
- ``committed``: the sync that committed the job's transition;
- ``cycle``: the start of the first cycle of the job's tree after that commit;
- ``applied``: the commit of the first cycle that admitted a job of the queue after it;
- ``unsuspended``: the queue's next unsuspension in the fake server's log.

Plus what the worker did with its time: tasks by kind (count, median, sum), the sync's
and the cycles' parts, and how late reacts started after their due time.
"""

from __future__ import annotations

import bisect
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from queueing.trace import parse

STEPS = ("informer", "wake", "task", "committed", "cycle", "applied", "unsuspended")


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 3),
        "p95": round(_pct(values, 95), 3),
        "mean": round(statistics.fmean(values), 3),
    }


def read_traces(logs: Path) -> list[tuple[float, int, str, dict[str, Any]]]:
    out = []
    for path in sorted(logs.glob("*.log")):
        with path.open(errors="replace") as lines:
            for line in lines:
                parsed = parse(line)
                if parsed is not None:
                    out.append(parsed)
    out.sort(key=lambda item: item[0])
    return out


def root_of(namespace: str) -> str:
    """bench_e2e's trees: ClusterQueue cq-<cohort>-<q> belongs to the root cohort-<cohort>."""
    return f"cohort-{namespace.split('-')[1]}"


def analyse(traces: list[tuple[float, int, str, dict[str, Any]]], entries: list[dict]) -> dict:
    # The fake server's side: creations, unsuspensions and finishes per namespace.
    created: dict[str, float] = {}
    unsuspended: dict[str, list[float]] = defaultdict(list)
    first_unsuspend: dict[str, float] = {}
    finishes: list[tuple[float, str]] = []
    for e in entries:
        obj = e.get("object") or ""
        if e["type"] == "suspend":
            if e.get("previous") is None:
                created[obj] = e["t"]
            elif e.get("suspend") is False and e.get("previous") is True:
                unsuspended[obj.split("/")[0]].append(e["t"])
                first_unsuspend.setdefault(obj, e["t"])
        elif e["type"] == "job_finished":
            finishes.append((e["t"], obj))
    for times in unsuspended.values():
        times.sort()
    waiting_at: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for obj, at in created.items():
        waiting_at[obj.split("/")[0]].append((at, first_unsuspend.get(obj, float("inf"))))

    # The product's side, by step.
    informer: dict[str, float] = {}
    committed: dict[str, float] = {}
    wakes: list[float] = []
    tasks: list[float] = []
    cycles: dict[str, list[float]] = defaultdict(list)  # root -> cycle start times
    applied: dict[str, list[float]] = defaultdict(list)  # namespace -> apply commit times
    task_ms: dict[str, list[float]] = defaultdict(list)
    late_ms: list[float] = []
    parts: dict[str, list[float]] = defaultdict(list)
    busy = 0
    skips: dict[str, int] = defaultdict(int)
    for t, _pid, step, f in traces:
        if step == "informer" and f.get("state") in ("Succeeded", "Failed"):
            informer.setdefault(f["job"], t)
        elif step == "wake":
            wakes.append(t)
        elif step == "task":
            tasks.append(t)
            if f.get("kind") == "react" and f.get("late_ms") is not None:
                late_ms.append(f["late_ms"])
        elif step == "task_done":
            kind = f.get("kind", "?")
            if kind == "react":
                kind = "react " + ("sync" if f.get("target") == "sync" else "tree")
            task_ms[kind].append(f.get("ms") or 0.0)
            if f.get("woken") is not None:
                parts[f"{kind} woke trees"].append(f["woken"])
            if f.get("cycled") is not None:
                parts[f"{kind} cycled trees"].append(f["cycled"])
        elif step == "forecast":  # the forecaster's work for one tree (its own process)
            task_ms["forecast"].append(f.get("ms") or 0.0)
        elif step == "committed":
            for job in f.get("finished") or []:
                if job:
                    committed.setdefault(job, t)
        elif step == "cycle":
            cycles[f["root"]].append(t - f.get("ms", 0.0) / 1000)
            for name in (
                "lease_ms",
                "refresh_ms",
                "snapshot_ms",
                "engine_ms",
                "apply_ms",
                "ms",
                "cpu_ms",
                "statements",
                "round_trips",
            ):
                parts[f"cycle {name}"].append(f.get(name) or 0.0)
        elif step == "nodes":
            for name in ("read_ms", "persist_ms"):
                parts[f"nodes {name}"].append(f.get(name) or 0.0)
        elif step == "tick_skips":
            skips[f.get("what", "?")] += f.get("n", 1)
        elif step == "calls_wait":
            parts["calls_wait ms"].append(f.get("ms") or 0.0)
        elif step == "cycle_busy":
            busy += 1
        elif step == "applied":
            for name, ms in (f.get("steps") or {}).items():
                parts[f"apply {name}_ms"].append(ms)
            for job in f.get("admitted") or []:
                namespace = job.split("/")[0]
                if not applied[namespace] or applied[namespace][-1] != t:
                    applied[namespace].append(t)
        elif step == "sync":
            for name in ("jobs_ms", "after_ms"):
                parts[f"sync {name}"].append(f.get(name) or 0.0)
        elif step == "sync_cost":
            for name in ("cpu_ms", "statements", "round_trips"):
                parts[f"sync {name}"].append(f.get(name) or 0.0)
        elif step == "after_sync":
            for name in ("config_ms", "events_ms", "quotas_ms"):
                parts[f"after_sync {name}"].append(f.get(name) or 0.0)
    for times in cycles.values():
        times.sort()

    def after(times: list[float], t: float | None) -> float | None:
        if t is None:
            return None
        i = bisect.bisect_right(times, t)
        return times[i] if i < len(times) else None

    segments: dict[str, list[float]] = defaultdict(list)
    handoffs: list[float] = []
    for t_f, obj in finishes:
        namespace = obj.split("/")[0]
        if not any(c < t_f < u for c, u in waiting_at[namespace]):
            continue  # nothing of its queue was waiting: no hand-off to measure
        marks: dict[str, float | None] = {}
        marks["informer"] = informer.get(obj)
        marks["wake"] = after(wakes, marks["informer"])
        marks["task"] = after(tasks, marks["wake"])
        marks["committed"] = committed.get(obj)
        marks["cycle"] = after(cycles.get(root_of(namespace), []), marks["committed"])
        marks["applied"] = after(applied.get(namespace, []), marks["committed"])
        marks["unsuspended"] = after(unsuspended.get(namespace, []), t_f)
        if marks["unsuspended"] is not None:
            handoffs.append(marks["unsuspended"] - t_f)
        previous = t_f
        previous_name = "finished"
        for step in STEPS:
            at = marks[step]
            if at is None:
                continue
            segments[f"{previous_name} -> {step}"].append(at - previous)
            segments[f"finished -> {step}"].append(at - t_f)
            previous, previous_name = at, step
    return {
        "handoff_s": _stats(handoffs),
        "segments_s": {k: _stats(v) for k, v in sorted(segments.items())},
        "tasks_ms": {
            k: {**(_stats(v) or {}), "sum_s": round(sum(v) / 1000, 1)}
            for k, v in sorted(task_ms.items())
        },
        "react_late_ms": _stats(late_ms),
        "parts_ms": {k: _stats(v) for k, v in sorted(parts.items())},
        "cycles_busy": busy,
        "wakes": len(wakes),
        # What a finish cost the worker: tasks and tree cycles per finished job, and
        # what beat's tick left to woken tasks (queueing.wake.covered).
        "per_finish": {
            "finishes": len(finishes),
            "tasks": round(len(tasks) / max(1, len(finishes)), 3),
            "cycles": round(sum(len(v) for v in cycles.values()) / max(1, len(finishes)), 3),
        },
        "tick_skips": dict(skips),
    }


def thread_cpu(
    traces: list[tuple[float, int, str, dict[str, Any]]],
    pid: int,
    before: dict[int, float],
    after: dict[int, float],
) -> dict[str, float]:
    """CPU seconds of the worker's threads over the run, grouped by Python thread name
    (digits and the informers' scopes folded: "watch-Job@cq-0-1" -> "watch-Job")."""
    names: dict[int, str] = {}
    for _t, from_pid, step, fields in traces:
        if from_pid == pid and step == "task_done":
            names.update({int(k): v for k, v in (fields.get("threads") or {}).items()})
    out: dict[str, float] = defaultdict(float)
    for tid, cpu in after.items():
        name = names.get(tid, "main" if tid == pid else "?")
        group = name.split("@")[0].rstrip("0123456789_-") or name
        out[group] += cpu - before.get(tid, 0.0)
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> None:
    logs = Path(argv[1])
    entries = [json.loads(line) for line in (logs / "fake.jsonl").read_text().splitlines()]
    print(json.dumps(analyse(read_traces(logs), entries), indent=1))


if __name__ == "__main__":
    main(sys.argv)

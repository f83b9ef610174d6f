"""Admission latency on an idle cluster: `python -m tests.bench admission_latency`.

Two figures per mode, as the product is deployed by ``make run`` (a Celery worker for
beat's ticks, a cycle worker for woken cycles, beat at its default interval, and in
Kubernetes mode ``watch_cluster``), each in processes of their own:

- **submit**: from a submission (simulated: the Workload's creation; Kubernetes: the
  Job's creation in the API server) to its admission, measured where the cluster records
  it (simulated: the job's start; Kubernetes: its unsuspension in the fake API server's
  log), on an idle cluster;
- **handoff**: from the finish of a job that holds its quota's whole share to the
  admission of the job waiting behind it (the same records).

Each round submits job A (the whole quota, 0.5 s), a submit sample once it is admitted;
then job B (the whole quota, 0.2 s), which waits; A's finish to B's admission is a
handoff sample. Then the cluster is left idle until B has finished.

One JSON line per mode: name, mode, submit_p50_ms, submit_p95_ms, handoff_p50_ms,
handoff_p95_ms, samples (rounds measured; each gives one of each). The first WARMUP
rounds are run but not counted: they measure the processes' first connections and
imports, not the path. Knobs:
KQ_BENCH_LATENCY_ROUNDS (default 30), KQ_BENCH_LATENCY_MODES (default
"simulated,kubernetes").
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.bench.bench_e2e import Api, Processes, database, redis
from tests.fakekube.client import FakeKubeProcess, RemoteFakeKube, write_kubeconfig
from tests.fakekube.runner import RUNTIME_ANNOTATION
from tests.services import celery_beat_argv

NAMESPACE = "lat"
QUOTA_CPU = 8
LONG_S = 0.5  # job A
SHORT_S = 0.2  # job B
POLL_S = 0.005
WARMUP = 2


def worker_argv(name: str, queue: str, *, solo: bool) -> list[str]:
    """run_all's worker (beat's ticks) and cycler (woken cycles)."""
    pool = ["--pool", "solo"] if solo else ["--concurrency", "2"]
    return [
        *("-m", "celery", "-A", "portal", "worker", *pool, "-Q", queue),
        *("--loglevel", "WARNING", "--without-gossip", "--without-mingle"),
        *("--without-heartbeat", "-n", f"{name}@%h"),
    ]


def seed(simulated: bool) -> None:
    """One tree, one quota of QUOTA_CPU, one namespace; in simulated mode one node."""
    import django

    django.setup()
    from django.core.management import call_command

    from queueing import actions
    from queueing.actions import Actor

    system = Actor.system()
    call_command("migrate", verbosity=0)
    root = actions.create_quota(
        system,
        name="lat-root",
        tenant=None,
        parent=None,
        min={"cpu": str(QUOTA_CPU)},
        max={"cpu": str(QUOTA_CPU)},
    )
    tenant = actions.create_tenant(system, name=NAMESPACE)
    actions.create_quota(
        system,
        name="lat-q",
        tenant=tenant,
        parent=root,
        min={"cpu": str(QUOTA_CPU)},
        max={"cpu": str(QUOTA_CPU)},
        namespaces=[NAMESPACE],
    )
    if simulated:
        actions.upsert_sim_node(
            system, name="node-0", allocatable={"cpu": str(QUOTA_CPU), "memory": "64Gi"}
        )


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    until = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > until:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(POLL_S)


# --- simulated: a driver process with Django -------------------------------------------


def drive_simulated(rounds: int) -> None:
    """Runs in a child with the bench's settings; prints the samples as JSON."""
    import django

    django.setup()
    from queueing import actions
    from queueing.actions import Actor
    from queueing.models import Quota, SimJob, Workload

    system = Actor.system()
    quota = Quota.objects.get(name="lat-q")

    def submit(name: str, runtime: float) -> Workload:
        return actions.submit_workload(
            system,
            tenant=None,
            quota=quota,
            name=name,
            pod_sets=[{"count": 1, "requests": {"cpu": str(QUOTA_CPU)}}],
            expected_runtime_s=runtime,
        )

    def job(name: str) -> SimJob:
        return SimJob.objects.get(namespace=NAMESPACE, name=name)

    submits: list[float] = []
    handoffs: list[float] = []
    for i in range(rounds):
        first = submit(f"a{i}", LONG_S)
        started = _wait(lambda i=i: job(f"a{i}").started_at, 30, f"a{i} to start")
        submits.append((started - first.created_at).total_seconds())
        submit(f"b{i}", SHORT_S)
        b_started = _wait(lambda i=i: job(f"b{i}").started_at, 30, f"b{i} to start")
        a_finished = job(f"a{i}").started_at
        assert a_finished is not None
        a_end = a_finished.timestamp() + job(f"a{i}").runtime_s
        handoffs.append(b_started.timestamp() - a_end)
        # Idle again: B has finished and the sync has given its quota back.
        _wait(
            lambda i=i: Workload.objects.filter(name=f"b{i}", phase="Succeeded").exists(),
            30,
            f"b{i} to finish",
        )
    print(json.dumps({"submit": submits, "handoff": handoffs}))


# --- kubernetes: the bench talks to the fake API server ----------------------------------


def manifest(name: str, runtime: float) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"koord-queue/queue-name": "lat-q"},
            "annotations": {
                "koord-queue/expected-runtime-seconds": str(runtime),
                RUNTIME_ANNOTATION: str(runtime),
            },
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"requests": {"cpu": str(QUOTA_CPU)}},
                        }
                    ],
                }
            },
        },
    }


def drive_kubernetes(url: str, control: RemoteFakeKube, rounds: int) -> dict[str, list[float]]:
    api = Api(url)
    path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
    seen = 0
    times: dict[tuple[str, str], float] = {}  # (job name, "created"|"admitted"|"finished")

    def record() -> None:
        nonlocal seen
        entries = control.log_entries(since=seen, types=["suspend", "job_finished"])
        for entry in entries:
            seen = max(seen, int(entry["seq"]))
            name = str(entry.get("object", "")).rpartition("/")[2]
            if entry["type"] == "suspend":
                if entry.get("previous") is None:
                    times.setdefault((name, "created"), entry["t"])
                elif entry.get("suspend") is False and entry.get("previous") is True:
                    times.setdefault((name, "admitted"), entry["t"])
            elif entry["type"] == "job_finished":
                times.setdefault((name, "finished"), entry["t"])

    def has(name: str, what: str) -> bool:
        record()
        return (name, what) in times

    submits: list[float] = []
    handoffs: list[float] = []
    for i in range(rounds):
        api.post(path, manifest(f"a{i}", LONG_S))
        _wait(lambda i=i: has(f"a{i}", "admitted"), 30, f"a{i} to be unsuspended")
        submits.append(times[(f"a{i}", "admitted")] - times[(f"a{i}", "created")])
        api.post(path, manifest(f"b{i}", SHORT_S))
        _wait(lambda i=i: has(f"b{i}", "admitted"), 30, f"b{i} to be unsuspended")
        _wait(lambda i=i: has(f"a{i}", "finished"), 30, f"a{i} to finish")
        handoffs.append(times[(f"b{i}", "admitted")] - times[(f"a{i}", "finished")])
        _wait(lambda i=i: has(f"b{i}", "finished"), 30, f"b{i} to finish")
        time.sleep(0.3)  # leave the sync a moment to give B's quota back: idle again
    return {"submit": submits, "handoff": handoffs}


# --- the run ---------------------------------------------------------------------------


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def run_mode(mode: str, rounds: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"kq-bench-latency-{mode}-"))
    logs = tmp / "logs"
    logs.mkdir()
    failed = True
    with ExitStack() as stack:
        db_url = stack.enter_context(database(tmp))
        redis_url = stack.enter_context(redis())
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": db_url,
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "KQ_VAR_DIR": str(tmp / "var"),
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(40),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "KQ_CLUSTER": mode,
            "KQ_SIM_FAILURE_RATE": "0",
            "KQ_DEMO_TRICKLE": "0",
            "LOG_LEVEL": "WARNING",
        }
        fake = None
        if mode == "kubernetes":
            fake = stack.enter_context(FakeKubeProcess("--time-scale", "1"))
            env.update(
                {
                    "KUBECONFIG": str(write_kubeconfig(tmp / "kubeconfig", fake.url)),
                    "KQ_NAMESPACES": NAMESPACE,
                    "KQ_KINDS": "Job",
                    "KQ_KUBE_WATCH_CACHE": "1",
                }
            )
            api = Api(fake.url)
            api.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            api.post(
                "/api/v1/nodes",
                {
                    "metadata": {"name": "node-0"},
                    "status": {
                        "allocatable": {"cpu": str(QUOTA_CPU), "memory": "64Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                },
            )
        procs = Processes(env, logs)
        stack.callback(procs.stop)
        procs.run("-c", f"from tests.bench.bench_latency import seed; seed({mode == 'simulated'})")
        procs.start("beat", *celery_beat_argv(tmp / "beat-schedule"))
        procs.start("worker", *worker_argv("worker", "celery", solo=False))
        procs.start("cycler", *worker_argv("cycler", "cycle", solo=True))
        if fake is not None:
            procs.start("watch", "manage.py", "watch_cluster")
            control = RemoteFakeKube(fake.url)
            time.sleep(5.0)  # the watcher and the workers list and start watching
            samples = drive_kubernetes(fake.url, control, rounds + WARMUP)
        else:
            time.sleep(3.0)  # the workers connect to the broker
            out = procs.run(
                "-c",
                f"from tests.bench.bench_latency import drive_simulated; drive_simulated({rounds + WARMUP})",
            )
            samples = json.loads(out.strip().splitlines()[-1])
        failed = False
    if failed:
        print(f"admission_latency: logs kept in {logs}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    submit_ms = [s * 1000 for s in samples["submit"][WARMUP:]]
    handoff_ms = [s * 1000 for s in samples["handoff"][WARMUP:]]
    return {
        "mode": mode,
        "submit_p50_ms": round(statistics.median(submit_ms), 1),
        "submit_p95_ms": round(_pct(submit_ms, 95), 1),
        "handoff_p50_ms": round(statistics.median(handoff_ms), 1),
        "handoff_p95_ms": round(_pct(handoff_ms, 95), 1),
        "samples": len(submit_ms),
        "database": db_url.split(":", 1)[0],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def admission_latency() -> dict[str, Any]:
    """Prints one line per mode itself (the runner prints the last one it returns)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rounds = int(os.environ.get("KQ_BENCH_LATENCY_ROUNDS", "30"))
    modes = os.environ.get("KQ_BENCH_LATENCY_MODES", "simulated,kubernetes").split(",")
    results = [run_mode(mode.strip(), rounds) for mode in modes if mode.strip()]
    for result in results[:-1]:
        print(json.dumps({"name": "admission_latency", **result}), flush=True)
    return results[-1]


# --- one cycle of the in-memory world ---------------------------------------------------

WORLD_PENDING = 14_000
WORLD_QUEUES = 6


def measure_world_cycle(pending: int, cycles: int) -> None:
    """Runs in a child with a scratch database; prints the figures as JSON.

    One tree of Kueue's cohort shape (6 leaf quotas of 20 cpu under a 120-cpu root, a
    queue each), ``pending`` one-cpu workloads waiting and the quota full of running
    ones. Then ``cycles`` times: one submission, and one cycle of the tree
    (``cycle_root``), timed in parts: the world's refresh, the snapshot from memory and
    the engine (the in-memory cycle), and the whole cycle with its database writes."""
    import django

    django.setup()
    import random
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    from queueing import actions, state, world
    from queueing.actions import Actor, total_request
    from queueing.admission import cycle_root
    from queueing.choices import Phase, Source
    from queueing.cluster.simulated import SimulatedCluster
    from queueing.engine import run_cycle as engine_cycle
    from queueing.models import Quota, Workload

    call_command("migrate", verbosity=0)
    system = Actor.system()
    root = actions.create_quota(
        system,
        name="cohort",
        tenant=None,
        parent=None,
        min={"cpu": str(20 * WORLD_QUEUES)},
        max={"cpu": str(20 * WORLD_QUEUES)},
    )
    leaves: list[Quota] = []
    for q in range(WORLD_QUEUES):
        tenant = actions.create_tenant(system, name=f"cq-{q}")
        leaves.append(
            actions.create_quota(
                system,
                name=f"cq-{q}",
                tenant=tenant,
                parent=root,
                min={"cpu": "20"},
                max={"cpu": "120"},
                namespaces=[f"cq-{q}"],
            )
        )
    actions.upsert_sim_node(
        system, name="node-0", allocatable={"cpu": "1000", "memory": "4Ti", "pods": "100000"}
    )
    rng = random.Random(7)
    now = timezone.now()
    pod_sets = [{"name": "main", "count": 1, "requests": {"cpu": 1000}}]
    rows = []
    for i in range(pending + 20 * WORLD_QUEUES):
        quota = leaves[i % WORLD_QUEUES]
        running = i < 20 * WORLD_QUEUES
        rows.append(
            Workload(
                tenant_id=quota.tenant_id,
                quota=quota,
                queue_id=quota.default_queue_id,
                name=f"w-{i:06d}",
                namespace=quota.namespaces[0],
                priority=rng.choice([50, 100, 200]),
                pod_sets=pod_sets,
                total_request=total_request(pod_sets),
                expected_runtime_s=1.0,
                queue_order_at=now - timedelta(seconds=pending - i),
                phase=Phase.RUNNING if running else Phase.PENDING,
                assignment={"node-0": {"cpu": 1000}} if running else {},
                admitted_at=now if running else None,
                started_at=now if running else None,
                source=Source.API,
            )
        )
    Workload.objects.bulk_create(rows, batch_size=2000)
    cluster = SimulatedCluster(failure_rate=0.0)
    nodes = cluster.nodes()
    cycle_root("cohort", cluster=cluster, nodes=nodes)  # builds the world: the first cycle
    tree = world.world_of("cohort")
    quota_ids = state.tree_quota_ids("cohort")
    in_memory: list[float] = []
    whole: list[float] = []
    whole_cpu: list[float] = []  # process time: the machine is shared, wall time is noisy
    engine: list[float] = []
    profile = None
    if os.environ.get("KQ_BENCH_PROFILE"):  # where the in-memory part's time goes, on stderr
        import cProfile

        profile = cProfile.Profile()
    for i in range(cycles):
        actions.submit_workload(
            system,
            tenant=None,
            quota=leaves[i % WORLD_QUEUES],
            name=f"late-{i}",
            pod_sets=[{"count": 1, "requests": {"cpu": "1"}}],
            expected_runtime_s=1.0,
        )
        # The in-memory part, as cycle_root runs it (without the lease and the apply).
        if profile is not None and os.environ["KQ_BENCH_PROFILE"] != "whole":
            profile.enable()
        started = time.perf_counter()
        tree.refresh(quota_ids)
        snapshot, _ = state.build_snapshot("cohort", nodes=nodes, head=state.HEAD_ROWS, world=tree)
        engine_started = time.perf_counter()
        engine_cycle(snapshot)
        done = time.perf_counter()
        if profile is not None:
            profile.disable()
        in_memory.append((done - started) * 1000)
        engine.append((done - engine_started) * 1000)
        # The whole cycle, database writes included (heads-only, as at scale).
        state.full_cycle_done("cohort", 60.0)  # keeps the next cycle heads-only
        if profile is not None and os.environ["KQ_BENCH_PROFILE"] == "whole":
            profile.enable()
        started = time.perf_counter()
        cpu_started = time.process_time()
        cycle_root("cohort", cluster=cluster, nodes=nodes)
        whole_cpu.append((time.process_time() - cpu_started) * 1000)
        whole.append((time.perf_counter() - started) * 1000)
        if profile is not None:
            profile.disable()
    if profile is not None:
        import pstats

        pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    waiting = Workload.objects.filter(phase=Phase.PENDING).count()
    print(
        json.dumps(
            {
                "pending": waiting,
                "cycles": cycles,
                "in_memory_ms_median": round(statistics.median(in_memory), 1),
                "in_memory_ms_p95": round(_pct(in_memory, 95), 1),
                "engine_ms_median": round(statistics.median(engine), 1),
                "cycle_ms_median": round(statistics.median(whole), 1),
                "cycle_ms_p95": round(_pct(whole, 95), 1),
                "cycle_cpu_ms_median": round(statistics.median(whole_cpu), 1),
                "cycle_cpu_ms_p95": round(_pct(whole_cpu, 95), 1),
                "world_rebuilds": tree.rebuilds,
            }
        )
    )


def world_cycle_14k() -> dict[str, Any]:
    cycles = int(os.environ.get("KQ_BENCH_WORLD_CYCLES", "30"))
    tmp = Path(tempfile.mkdtemp(prefix="kq-bench-world-"))
    with ExitStack() as stack:
        db_url = stack.enter_context(database(tmp))
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": db_url,
            "KQ_VAR_DIR": str(tmp / "var"),
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(40),
            "KQ_CLUSTER": "simulated",
            "KQ_WAKE": "0",
            "KQ_FAIR_SHARE_MODE": "instant",
            "LOG_LEVEL": "WARNING",
        }
        env.pop("REDIS_URL", None)  # one process: the journal in memory
        procs = Processes(env, tmp)
        out = procs.run(
            "-c",
            "from tests.bench.bench_latency import measure_world_cycle; "
            f"measure_world_cycle({WORLD_PENDING}, {cycles})",
        )
    shutil.rmtree(tmp, ignore_errors=True)
    result = json.loads(out.strip().splitlines()[-1])
    result["database"] = db_url.split(":", 1)[0]
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return result


BENCHMARKS = {"admission_latency": admission_latency, "world_cycle_14k": world_cycle_14k}

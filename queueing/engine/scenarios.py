"""Generated worlds for benchmarks and the simulator.

* :func:`synthetic_snapshot` -- a large, busy cluster: thousands of nodes (CPU and
  tainted GPU pools), a two-level quota tree (departments and teams), thousands of
  queues with mixed policies, a cluster mostly full of running work and tens of
  thousands of pending workloads of mixed shapes (single pods, gangs, GPU jobs).
* :func:`kueue_baseline` -- Kueue's scheduler baseline scenario
  (``test/performance/scheduler/configs/baseline/generator.yaml`` in
  kubernetes-sigs/kueue) as a :class:`~.simulator.Scenario`.

Everything is deterministic for a seed (``random.Random(seed)``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario
from queueing.engine.types import (
    EngineConfig,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    Taint,
    Toleration,
    WorkloadSpec,
)

__all__ = [
    "SCENARIOS",
    "KueueClass",
    "kueue_baseline",
    "kueue_baseline_10x",
    "kueue_baseline_classes",
    "synthetic_snapshot",
]

GI = 2**30
GPU = "nvidia.com/gpu"
POOL = "koord-queue/pool"
GPU_TAINT = Taint(GPU, "present", "NoSchedule")
GPU_TOLERATION = Toleration(GPU, "Exists", "", "NoSchedule")


def synthetic_snapshot(
    pending: int = 60_000,
    queues: int = 2_000,
    nodes: int = 2_000,
    *,
    seed: int = 1,
    running_fill: float = 0.9,
    config: EngineConfig | None = None,
    now: float = 1_700_000_000.0,
) -> Snapshot:
    """A busy cluster with ``pending`` waiting workloads spread over ``queues`` queues.

    One team quota per two queues (``queues // 2`` teams) under 20 departments under
    one root. A fifth of the nodes are tainted GPU nodes (pool ``gpu``); running
    workloads fill about ``running_fill`` of the CPU capacity.
    """
    rng = random.Random(seed)
    n_gpu = nodes // 5
    node_specs: list[NodeSpec] = []
    for i in range(nodes):
        gpu = i < n_gpu
        if gpu:
            alloc = Resources({"cpu": 96_000, "memory": 1024 * GI, GPU: 8, "pods": 110})
            labels = {POOL: "gpu", "zone": f"z{i % 3}"}
            taints: tuple[Taint, ...] = (GPU_TAINT,)
        else:
            alloc = Resources({"cpu": 64_000, "memory": 256 * GI, "pods": 110})
            labels = {POOL: "cpu", "zone": f"z{i % 3}"}
            taints = ()
        node_specs.append(
            NodeSpec(
                name=f"node-{i:05d}",
                allocatable=alloc,
                reserved=Resources({"cpu": 1000, "memory": 2 * GI, "pods": 5}),
                labels=labels,
                taints=taints,
                unschedulable=(i % 500 == 499),
            )
        )
    total_cpu = sum(n.allocatable["cpu"] for n in node_specs)
    total_gpu = n_gpu * 8
    n_depts = 20
    n_teams = max(1, queues // 2)
    quota_specs: list[QuotaNode] = [QuotaNode("root")]
    dept_cpu = total_cpu // n_depts
    for d in range(n_depts):
        quota_specs.append(
            QuotaNode(
                f"dept-{d:02d}",
                "root",
                min=Resources({"cpu": int(dept_cpu * 0.8), GPU: total_gpu // n_depts}),
                max={"cpu": dept_cpu * 2, GPU: total_gpu // 4},
            )
        )
    teams_per_dept = -(-n_teams // n_depts)
    team_cpu = int(dept_cpu * 0.8) // teams_per_dept
    team_names: list[str] = []
    for t in range(n_teams):
        name = f"team-{t:04d}"
        team_names.append(name)
        quota_specs.append(
            QuotaNode(
                name,
                f"dept-{t % n_depts:02d}",
                min=Resources({"cpu": team_cpu, GPU: 2}),
                max={"cpu": team_cpu * 8, GPU: 64},
                allow_lent=(t % 10 != 0),
            )
        )
    queue_specs: list[QueueSpec] = []
    queue_team: list[str] = []
    for qn in range(queues):
        r = rng.random()
        policy = "Priority" if r < 0.7 else ("Block" if r < 0.9 else "Intelligent")
        queue_specs.append(
            QueueSpec(
                f"queue-{qn:05d}",
                policy=policy,
                priority=100 if qn % 50 == 0 else 0,
                priority_threshold=7000,
                admission_timeout_s=1800.0,
            )
        )
        queue_team.append(team_names[qn // 2 % n_teams])

    workloads: list[WorkloadSpec] = []
    wid = 0
    priorities = (3000, 5000, 5000, 5000, 7000, 9000)

    def shape() -> tuple[tuple[PodSet, ...], bool]:
        r = rng.random()
        if r < 0.08:
            n = rng.choice((1, 2, 4, 8))
            ps = PodSet(
                "worker",
                n,
                Resources(
                    {"cpu": 8000, "memory": 64 * GI, GPU: rng.choice((1, 2, 4, 8)) if n == 1 else 8}
                ),
                node_selector={POOL: "gpu"},
                tolerations=(GPU_TOLERATION,),
            )
            return (ps,), True
        if r < 0.25:
            n = rng.choice((2, 4, 8, 16))
            return (
                PodSet("launcher", 1, Resources({"cpu": 1000, "memory": 2 * GI})),
                PodSet("worker", n, Resources({"cpu": rng.choice((2000, 4000)), "memory": 8 * GI})),
            ), False
        cpu = rng.choice((500, 1000, 2000, 4000, 8000))
        return (
            PodSet("main", 1, Resources({"cpu": cpu, "memory": cpu // 1000 * 4 * GI or 2 * GI})),
        ), False

    # Running work: fill the CPU nodes, spread over teams.
    cpu_nodes = [n for n in node_specs if n.labels[POOL] == "cpu" and not n.unschedulable]
    gpu_nodes = [n for n in node_specs if n.labels[POOL] == "gpu" and not n.unschedulable]
    for n in cpu_nodes:
        free = int((n.allocatable["cpu"] - 1000) * running_fill)
        while free >= 4000:
            cpu = rng.choice((2000, 4000, 8000))
            cpu = min(cpu, free)
            qn = rng.randrange(queues)
            wid += 1
            req = Resources({"cpu": cpu, "memory": cpu // 1000 * 2 * GI})
            workloads.append(
                WorkloadSpec(
                    id=wid,
                    name=f"run-{wid}",
                    quota=queue_team[qn],
                    queue=queue_specs[qn].name,
                    priority=rng.choice(priorities),
                    queue_order_at=now - rng.uniform(3600, 7200),
                    pod_sets=(PodSet("main", 1, req),),
                    phase="Running",
                    admitted_at=now - 3000.0,
                    started_at=now - rng.uniform(60, 3000),
                    expected_runtime_s=rng.choice((None, 3600.0, 7200.0)),
                    assignment={n.name: req},
                )
            )
            free -= cpu
    for n in gpu_nodes[: len(gpu_nodes) * 3 // 4]:
        qn = rng.randrange(queues)
        wid += 1
        req = Resources({"cpu": 8000, "memory": 64 * GI, GPU: 8})
        workloads.append(
            WorkloadSpec(
                id=wid,
                name=f"run-{wid}",
                quota=queue_team[qn],
                queue=queue_specs[qn].name,
                priority=rng.choice(priorities),
                queue_order_at=now - 7200.0,
                pod_sets=(PodSet("worker", 1, req, {POOL: "gpu"}, (GPU_TOLERATION,)),),
                phase="Running",
                admitted_at=now - 3000.0,
                started_at=now - 2900.0,
                assignment={n.name: req},
            )
        )
    for _ in range(pending):
        qn = rng.randrange(queues)
        pod_sets, _gpu = shape()
        wid += 1
        workloads.append(
            WorkloadSpec(
                id=wid,
                name=f"job-{wid}",
                quota=queue_team[qn],
                queue=queue_specs[qn].name,
                priority=rng.choice(priorities),
                queue_order_at=now - rng.uniform(0, 86_400),
                pod_sets=pod_sets,
                expected_runtime_s=rng.choice((None, 600.0, 1800.0, 3600.0)),
            )
        )
    history = {q.name: (900.0, 3000.0) for q in queue_specs[::3]}
    ledger = {t: {"cpu": rng.uniform(0, 1e9)} for t in team_names[::2]}
    return Snapshot(
        now=now,
        quotas=tuple(quota_specs),
        queues=tuple(queue_specs),
        workloads=tuple(workloads),
        nodes=tuple(node_specs),
        ledger=ledger,
        runtime_history=history,
        config=config or EngineConfig(),
    )


@dataclass(frozen=True, slots=True)
class KueueClass:
    """One workload class of Kueue's baseline generator (per queue)."""

    name: str
    count: int
    interval_s: float
    runtime_s: float
    priority: int
    request: int  # cpu units


def kueue_baseline_classes() -> tuple[KueueClass, ...]:
    """The three classes of Kueue's baseline, per ClusterQueue."""
    return (
        KueueClass("small", 350, 0.1, 0.2, 50, 1),
        KueueClass("medium", 100, 0.5, 0.5, 100, 5),
        KueueClass("large", 50, 1.2, 1.0, 200, 20),
    )


def kueue_baseline(
    cohorts: int = 5, queues_per_cohort: int = 6, nominal: int = 20, borrowing_limit: int = 100
) -> Scenario:
    """Kueue's scheduler baseline (``configs/baseline/generator.yaml``) as a scenario.

    Kueue objects map onto ours one to one: a cohort is a root quota whose max is the
    sum of its ClusterQueues' nominal quota (what a cohort can lend); a ClusterQueue
    is a leaf quota with ``min`` = nominal and ``max`` = nominal + borrowingLimit and
    its own queue (BestEffortFIFO = ``Priority``; ``withinClusterQueue: LowerPriority``
    = ``preempt_within_quota="LowerPriority"``; ``reclaimWithinCohort: Any`` =
    ``reclaim="Any"``). Workloads are created one per interval per class and queue,
    the first after one interval, as Kueue's generator does (it waits before each
    creation). Kueue's test has no nodes, only quota; one node holds the whole
    capacity so that placement never binds either. One cpu unit = 1000 millicores.
    """
    unit = 1000
    quotas: list[QuotaNode] = []
    queues: list[QueueSpec] = []
    measured: dict[str, int] = {}
    arrivals: list[Arrival] = []
    wid = 0
    classes = kueue_baseline_classes()
    for c in range(cohorts):
        cohort = f"cohort-{c}"
        quotas.append(QuotaNode(cohort, None, max={"cpu": nominal * queues_per_cohort * unit}))
        for q in range(queues_per_cohort):
            name = f"cq-{c}-{q}"
            quotas.append(
                QuotaNode(
                    name,
                    cohort,
                    min=Resources({"cpu": nominal * unit}),
                    max={"cpu": (nominal + borrowing_limit) * unit},
                )
            )
            queues.append(
                QueueSpec(
                    name,
                    policy="Priority",
                    preempt_within_quota="LowerPriority",
                    reclaim="Any",
                )
            )
            measured[name] = nominal * unit
            for k in classes:
                for i in range(k.count):
                    at = round((i + 1) * k.interval_s, 6)
                    wid += 1
                    w = WorkloadSpec(
                        id=wid,
                        name=f"{k.name}-{c}-{q}-{i}",
                        quota=name,
                        queue=name,
                        priority=k.priority,
                        queue_order_at=1_700_000_000.0 + at,
                        pod_sets=(PodSet("main", 1, Resources({"cpu": k.request * unit})),),
                        expected_runtime_s=k.runtime_s,
                    )
                    arrivals.append(Arrival(at, w, k.name, k.runtime_s))
    total = cohorts * queues_per_cohort * nominal * unit
    return Scenario(
        name="kueue-baseline",
        quotas=tuple(quotas),
        queues=tuple(queues),
        nodes=(NodeSpec("sim-node", Resources({"cpu": total})),),
        arrivals=tuple(arrivals),
        measured=measured,
        resource="cpu",
    )


def kueue_baseline_10x() -> Scenario:
    """Kueue's baseline ten times over: 50 cohorts (quota trees) of 6 ClusterQueues, 300
    queues, 150,000 workloads on the same schedule -- the load of ``docs/scaling.md``."""
    scenario = kueue_baseline(cohorts=50)
    return replace(scenario, name="kueue-baseline-10x")


#: Scenarios the ``simulate`` command knows, by name.
SCENARIOS: dict[str, Callable[[], Scenario]] = {"kueue-baseline": kueue_baseline}


# -- worlds for the ETA calibration benchmark ----------------------------------------

#: The demo world of ``make run`` (``queueing/demo.py``), in canonical units: quota
#: name, parent, min, max (cpu cores, memory Gi, GPUs), policy of its default queue,
#: allow_lent. Kept in step with the demo by hand (the demo is Django-side).
DEMO_TREE: tuple[tuple[str, str, tuple[int, int, int], tuple[int, int, int], str, bool], ...] = (
    ("vision", "cluster", (160, 1024, 32), (500, 4096, 64), "", True),
    ("vision-train", "vision", (120, 768, 24), (400, 3072, 56), "Priority", True),
    ("vision-dev", "vision", (40, 256, 8), (120, 1024, 16), "Block", True),
    ("nlp", "cluster", (160, 1024, 24), (500, 4096, 64), "", True),
    ("nlp-prod", "nlp", (100, 640, 16), (300, 2048, 48), "Intelligent", True),
    ("nlp-research", "nlp", (60, 384, 8), (300, 2048, 32), "Priority", True),
    ("analytics", "cluster", (160, 640, 0), (500, 2048, 0), "", True),
    ("analytics-etl", "analytics", (120, 512, 0), (500, 2048, 0), "Block", False),
    ("analytics-adhoc", "analytics", (40, 128, 0), (200, 1024, 0), "Priority", True),
)
#: The demo's job shapes: label, pods, per pod (cores, Gi, GPUs), declared runtime
#: range (s), priority, weight.
DEMO_SHAPES: tuple[tuple[str, int, tuple[int, int, int], tuple[int, int], int, int], ...] = (
    ("small", 1, (2, 4, 0), (15, 45), 5000, 6),
    ("medium", 4, (8, 32, 0), (30, 90), 5500, 3),
    ("large", 8, (16, 64, 0), (45, 120), 7000, 1),
    ("gpu-small", 1, (8, 64, 1), (20, 60), 5000, 4),
    ("gpu-gang", 4, (16, 128, 4), (40, 120), 9000, 1),
)
DEMO_GPU_QUOTAS = ("vision-train", "vision-dev", "nlp-prod", "nlp-research")
DEMO_CPU_QUOTAS = ("analytics-etl", "analytics-adhoc", "nlp-research", "vision-dev")


def _amounts(cores: int, gi: int, gpus: int) -> dict[str, int]:
    out = {"cpu": cores * 1000, "memory": gi * GI}
    if gpus:
        out[GPU] = gpus
    return out


#: The demo's waves (``queueing/demo.py``): every period one tenant in turn gets
#: 1-2 extra jobs a call for ``DEMO_WAVE_S``, into its quotas where the shape allows.
DEMO_WAVE_PERIOD_S = 180
DEMO_WAVE_S = 45
DEMO_WAVE_EXTRA = (1, 2)
DEMO_WAVE_TENANTS: tuple[tuple[str, ...], ...] = (
    ("vision-train", "vision-dev"),
    ("analytics-etl", "analytics-adhoc"),
    ("nlp-prod", "nlp-research"),
)
#: Share of picks beyond their quota's max that the demo keeps (the rest go to a quota
#: they fit): one now and then shows "can never fit".
DEMO_NEVER_FITS_SHARE = 0.05


def _demo_fits_max(
    quota: str, pods: int, per_pod: dict[str, int], maxes: dict[str, dict[str, int]]
) -> bool:
    parents = {name: parent for name, parent, *_ in DEMO_TREE}
    at: str | None = quota
    while at is not None and at in maxes:
        for k, v in per_pod.items():
            if k in maxes[at] and pods * v > maxes[at][k]:
                return False
        at = parents.get(at)
    return True


def demo_world(
    minutes: float = 15.0,
    *,
    seed: int = 7,
    every_s: float = 5.0,
    usage: tuple[float, float] = (0.4, 1.0),
    waves: bool = False,
) -> Scenario:
    """The demo world with its trickle: 1-3 jobs every ``every_s`` (the demo's beat) for
    ``minutes``.

    With ``waves`` it is the demo as ``make run`` runs it now (``queueing/demo.py``):
    a wave of 2-4 extra jobs a call for 45 s of every 3 minutes, one tenant in turn,
    and a job beyond its quota's max sent to a quota it fits (but one in twenty).

    Runtimes vary around their estimates: a job declares ``expected_runtime_s`` (a
    limit) and actually runs a uniform ``usage`` fraction of it. Both cases of the
    issue arise: vision-dev (Block, max 16 GPUs, 120 cpu) gets 4 x 4-GPU gangs that
    exceed its runtime quota while vision-train borrows, and 8 x 16-cpu jobs that can
    never fit its max.
    """
    rng = random.Random(seed)
    nodes: list[NodeSpec] = []
    for i in range(16):
        nodes.append(
            NodeSpec(
                f"cpu-{i + 1:02d}",
                Resources({"cpu": 32_000, "memory": 128 * GI, "pods": 110}),
                Resources({"cpu": 1000, "memory": 2 * GI}),
                {POOL: "cpu"},
            )
        )
    for i in range(8):
        nodes.append(
            NodeSpec(
                f"gpu-{i + 1:02d}",
                Resources({"cpu": 64_000, "memory": 512 * GI, GPU: 8, "pods": 110}),
                Resources({"cpu": 2000, "memory": 4 * GI}),
                {POOL: "gpu-a100"},
                (GPU_TAINT,),
            )
        )
    total_cpu = 16 * 31 + 8 * 62
    quotas = [
        QuotaNode(
            "cluster",
            min=Resources(_amounts(total_cpu, 5 * 1024, 64)),
            max=_amounts(total_cpu, 6 * 1024, 64),
        )
    ]
    queues: list[QueueSpec] = []
    for name, parent, mn, mx, policy, lend in DEMO_TREE:
        quotas.append(
            QuotaNode(
                name, parent, min=Resources(_amounts(*mn)), max=_amounts(*mx), allow_lent=lend
            )
        )
        if policy:
            queues.append(
                QueueSpec(
                    name, policy=policy, priority_threshold=7000 if policy == "Intelligent" else 0
                )
            )
    queues.append(QueueSpec("nlp-shared", policy="Block", priority=5))
    arrivals: list[Arrival] = []
    wid = 0
    t = 0.0
    weights = [s[5] for s in DEMO_SHAPES]
    maxes = {name: _amounts(*mx) for name, _p, _mn, mx, _pol, _l in DEMO_TREE}
    while t < minutes * 60:
        t += every_s
        steady = rng.randint(1, 3)
        period, into = divmod(int(t), DEMO_WAVE_PERIOD_S)
        wave = DEMO_WAVE_TENANTS[period % len(DEMO_WAVE_TENANTS)] if into < DEMO_WAVE_S else ()
        extra = rng.randint(*DEMO_WAVE_EXTRA) if waves and wave else 0
        for i in range(steady + extra):
            label, pods, (cores, gi, gpus), (low, high), prio, _w = rng.choices(
                DEMO_SHAPES, weights=weights
            )[0]
            targets: tuple[str, ...] = DEMO_GPU_QUOTAS if gpus else DEMO_CPU_QUOTAS
            if i >= steady:
                targets = tuple(n for n in wave if n in targets) or targets
            quota = rng.choice(targets)
            per_pod = _amounts(cores, gi, gpus)
            if (
                waves
                and not _demo_fits_max(quota, pods, per_pod, maxes)
                and rng.random() >= DEMO_NEVER_FITS_SHARE
            ):
                fitting = [
                    n
                    for n in (DEMO_GPU_QUOTAS if gpus else DEMO_CPU_QUOTAS)
                    if _demo_fits_max(n, pods, per_pod, maxes)
                ]
                if not fitting:
                    continue
                quota = rng.choice(fitting)
            queue = "nlp-shared" if quota.startswith("nlp") and rng.random() < 0.3 else quota
            declared = float(rng.randint(low, high))
            wid += 1
            ps = PodSet(
                "workers",
                pods,
                Resources(_amounts(cores, gi, gpus)),
                tolerations=(GPU_TOLERATION,) if gpus else (),
            )
            w = WorkloadSpec(
                id=wid,
                name=f"{label}-{wid}",
                quota=quota,
                queue=queue,
                priority=prio + rng.randint(0, 200),
                queue_order_at=1_700_000_000.0 + t,
                pod_sets=(ps,),
                expected_runtime_s=declared,
            )
            arrivals.append(Arrival(t, w, label, round(declared * rng.uniform(*usage), 3)))
    return Scenario(
        name="demo-waves" if waves else "demo",
        quotas=tuple(quotas),
        queues=tuple(queues),
        nodes=tuple(nodes),
        arrivals=tuple(arrivals),
        measured={name: mn[0] * 1000 for name, _p, mn, _mx, policy, _l in DEMO_TREE if policy},
        resource="cpu",
    )


def gpu_heavy(hours: float = 4.0, *, seed: int = 11, every_s: float = 70.0) -> Scenario:
    """A GPU cluster under pressure: gangs, priority bands, runtimes below their limits.

    16 nodes of 8 GPUs; a root with three teams (min 40 / 16 / 8 GPUs, max 96 / 64 /
    48) under a research department; queues of every policy with in-quota
    preemption. Poisson arrivals (a job every ``every_s`` on average: about 85 % of
    the GPUs' capacity) of 1-GPU jobs, 2 x 4 and 4 x 8 gangs in Koordinator's bands
    (koord-batch, koord-mid, koord-prod); declared runtimes of 5 to 60 minutes,
    actual runtimes 30-100 % of them.
    """
    rng = random.Random(seed)
    nodes = tuple(
        NodeSpec(
            f"gpu-{i:02d}",
            Resources({"cpu": 96_000, "memory": 1024 * GI, GPU: 8}),
            Resources({"cpu": 2000, "memory": 8 * GI}),
            {POOL: "gpu"},
            (GPU_TAINT,),
        )
        for i in range(16)
    )
    quotas = (
        QuotaNode("root", max={GPU: 128}),
        QuotaNode("research", "root", min=Resources({GPU: 64}), max={GPU: 128}),
        QuotaNode("llm", "research", min=Resources({GPU: 40}), max={GPU: 96}),
        QuotaNode("vision", "research", min=Resources({GPU: 16}), max={GPU: 64}),
        QuotaNode("speech", "research", min=Resources({GPU: 8}), max={GPU: 48}),
        QuotaNode("platform", "root", min=Resources({GPU: 16}), max={GPU: 64}),
    )
    queues = (
        QueueSpec("llm", policy="Block"),
        QueueSpec("vision", policy="Priority"),
        QueueSpec("speech", policy="Intelligent", priority_threshold=7000),
        QueueSpec("platform", policy="Priority", priority=5),
    )
    shapes = (
        ("gpu-1", 1, 1, (300, 1200), (5000, 3000), 6),
        ("gang-2x4", 2, 4, (600, 2400), (5000, 7000), 3),
        ("gang-4x8", 4, 8, (1200, 3600), (7000, 9000), 1),
    )
    arrivals: list[Arrival] = []
    t = 0.0
    wid = 0
    while True:
        t += rng.expovariate(1 / every_s)
        if t > hours * 3600:
            break
        label, pods, gpus, (low, high), prios, _ = rng.choices(
            shapes, weights=[s[5] for s in shapes]
        )[0]
        quota = rng.choice(("llm", "llm", "vision", "speech", "platform"))
        declared = float(rng.randint(low, high))
        wid += 1
        w = WorkloadSpec(
            id=wid,
            name=f"{label}-{wid}",
            quota=quota,
            queue=quota,
            priority=rng.choice(prios) + rng.randint(0, 99),
            queue_order_at=1_700_000_000.0 + t,
            pod_sets=(
                PodSet(
                    "workers",
                    pods,
                    Resources({"cpu": 8000 * gpus, "memory": 64 * GI * gpus, GPU: gpus}),
                    tolerations=(GPU_TOLERATION,),
                ),
            ),
            expected_runtime_s=declared,
        )
        arrivals.append(Arrival(t, w, label, round(declared * rng.uniform(0.3, 1.0), 3)))
    return Scenario(
        name="gpu-heavy",
        quotas=quotas,
        queues=queues,
        nodes=nodes,
        arrivals=tuple(arrivals),
        measured={"llm": 40, "vision": 16, "speech": 8, "platform": 16},
        resource=GPU,
    )


SCENARIOS["demo"] = demo_world
SCENARIOS["demo-waves"] = lambda: demo_world(waves=True)
SCENARIOS["gpu-heavy"] = gpu_heavy
SCENARIOS["kueue-baseline-10x"] = kueue_baseline_10x

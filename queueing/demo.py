"""The demo world of `make run`: tenants, a quota tree, queues of every policy, nodes,
and a trickle of jobs that keeps it moving. Everything is created through actions.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from queueing import actions, history
from queueing.actions import Actor
from queueing.choices import WAITING_PHASES, Role
from queueing.cluster.simulated import SIM_RUNTIME_ANNOTATION
from queueing.models import Queue, Quota, SimNode, Tenant, Workload
from queueing.quantities import parse_amount

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GI = 2**30


@dataclass(frozen=True)
class Login:
    username: str
    password: str
    role: str
    tenant: str


def logins_path() -> Path:
    return Path(settings.VAR_DIR) / "demo-logins.json"


def _nodes() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    for i in range(16):
        nodes.append(
            {
                "name": f"cpu-{i + 1:02d}",
                "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                "reserved": {"cpu": "1", "memory": "2Gi"},
                "labels": {
                    "koord-queue/pool": "cpu",
                    "topology.kubernetes.io/zone": f"zone-{i % 2}",
                },
            }
        )
    for i in range(8):
        nodes.append(
            {
                "name": f"gpu-{i + 1:02d}",
                "allocatable": {
                    "cpu": "64",
                    "memory": "512Gi",
                    "nvidia.com/gpu": "8",
                    "pods": "110",
                },
                "reserved": {"cpu": "2", "memory": "4Gi"},
                "labels": {
                    "koord-queue/pool": "gpu-a100",
                    "topology.kubernetes.io/zone": f"zone-{i % 2}",
                },
                "taints": [GPU_TAINT],
            }
        )
    return nodes


# Quota tree: name, tenant, parent, min, max, weight, policy of its default queue.
TREE: list[dict[str, Any]] = [
    {
        "name": "vision",
        "tenant": "vision",
        "parent": "cluster",
        "min": {"cpu": "160", "memory": "1Ti", "nvidia.com/gpu": "32"},
        "max": {"cpu": "500", "memory": "4Ti", "nvidia.com/gpu": "64"},
    },
    {
        "name": "vision-train",
        "tenant": "vision",
        "parent": "vision",
        "min": {"cpu": "120", "memory": "768Gi", "nvidia.com/gpu": "24"},
        "max": {"cpu": "400", "memory": "3Ti", "nvidia.com/gpu": "56"},
        "policy": "Priority",
    },
    {
        "name": "vision-dev",
        "tenant": "vision",
        "parent": "vision",
        "min": {"cpu": "40", "memory": "256Gi", "nvidia.com/gpu": "8"},
        "max": {"cpu": "120", "memory": "1Ti", "nvidia.com/gpu": "16"},
        "policy": "Block",
    },
    {
        "name": "nlp",
        "tenant": "nlp",
        "parent": "cluster",
        "min": {"cpu": "160", "memory": "1Ti", "nvidia.com/gpu": "24"},
        "max": {"cpu": "500", "memory": "4Ti", "nvidia.com/gpu": "64"},
    },
    {
        "name": "nlp-prod",
        "tenant": "nlp",
        "parent": "nlp",
        "min": {"cpu": "100", "memory": "640Gi", "nvidia.com/gpu": "16"},
        "max": {"cpu": "300", "memory": "2Ti", "nvidia.com/gpu": "48"},
        "policy": "Intelligent",
    },
    {
        "name": "nlp-research",
        "tenant": "nlp",
        "parent": "nlp",
        "min": {"cpu": "60", "memory": "384Gi", "nvidia.com/gpu": "8"},
        "max": {"cpu": "300", "memory": "2Ti", "nvidia.com/gpu": "32"},
        "policy": "Priority",
    },
    {
        "name": "analytics",
        "tenant": "analytics",
        "parent": "cluster",
        "min": {"cpu": "160", "memory": "640Gi"},
        "max": {"cpu": "500", "memory": "2Ti"},
    },
    {
        "name": "analytics-etl",
        "tenant": "analytics",
        "parent": "analytics",
        "min": {"cpu": "120", "memory": "512Gi"},
        "max": {"cpu": "500", "memory": "2Ti"},
        "policy": "Block",
        "allow_lent": False,
    },
    {
        "name": "analytics-adhoc",
        "tenant": "analytics",
        "parent": "analytics",
        "min": {"cpu": "40", "memory": "128Gi"},
        "max": {"cpu": "200", "memory": "1Ti"},
        "policy": "Priority",
    },
]

USERS = [
    ("ada", "vision", Role.ADMIN),
    ("noor", "nlp", Role.MEMBER),
    ("sam", "analytics", Role.VIEWER),
]


def seed(*, admin_password: str | None = None) -> list[Login] | None:
    """Create the demo world once. Returns the logins, or None if it already exists."""
    if Tenant.objects.exists():
        return None
    actor = Actor.system()
    with transaction.atomic():
        for node in _nodes():
            actions.upsert_sim_node(actor, **node)
        total_cpu = sum(32 - 1 for _ in range(16)) + sum(64 - 2 for _ in range(8))
        root = actions.create_quota(
            actor,
            name="cluster",
            tenant=None,
            parent=None,
            min={"cpu": str(total_cpu), "memory": "5Ti", "nvidia.com/gpu": "64"},
            max={"cpu": str(total_cpu), "memory": "6Ti", "nvidia.com/gpu": "64"},
        )
        tenants = {
            name: actions.create_tenant(actor, name=name, display_name=display)
            for name, display in (
                ("vision", "Vision research"),
                ("nlp", "Language models"),
                ("analytics", "Data analytics"),
            )
        }
        quotas: dict[str, Quota] = {"cluster": root}
        for node in TREE:
            quotas[node["name"]] = actions.create_quota(
                actor,
                name=node["name"],
                tenant=tenants[node["tenant"]],
                parent=quotas[node["parent"]],
                min=node["min"],
                max=node["max"],
                allow_lent=node.get("allow_lent", True),
                namespaces=[node["name"]],
                default_queue_policy=node.get("policy", "Priority"),
            )
        # A queue shared by two quotas: research and prod interns in one line.
        actions.create_queue(
            actor, tenant=tenants["nlp"], name="nlp-shared", policy="Block", priority=5
        )
        actions.update_queue(actor, Queue.objects.get(name="nlp-prod"), priority_threshold=7000)

        logins: list[Login] = []
        users = get_user_model()
        admin_pw = admin_password or secrets.token_urlsafe(9)
        users.objects.create_superuser("admin", "admin@example.invalid", admin_pw)
        logins.append(Login("admin", admin_pw, "cluster admin", "*"))
        for username, tenant_name, role in USERS:
            password = secrets.token_urlsafe(9)
            user = users.objects.create_user(username, f"{username}@example.invalid", password)
            actions.set_membership(actor, tenants[tenant_name], user, role)
            logins.append(Login(username, password, role, tenant_name))
    history.backfill()  # estimated fairness history, marked as such (queueing/history.py)
    path = logins_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([login.__dict__ for login in logins], indent=2))
    tmp.chmod(0o600)
    tmp.replace(path)
    return logins


def saved_logins() -> list[Login]:
    try:
        return [Login(**item) for item in json.loads(logins_path().read_text())]
    except (OSError, ValueError, TypeError):
        return []


# Job shapes: (label, pods, per-pod requests, runtime range in seconds, priority, weight)
SHAPES: list[tuple[str, int, dict[str, str], tuple[int, int], int, int]] = [
    ("small", 1, {"cpu": "2", "memory": "4Gi"}, (15, 45), 5000, 6),
    ("medium", 4, {"cpu": "8", "memory": "32Gi"}, (30, 90), 5500, 3),
    ("large", 8, {"cpu": "16", "memory": "64Gi"}, (45, 120), 7000, 1),
    ("gpu-small", 1, {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}, (20, 60), 5000, 4),
    ("gpu-gang", 4, {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"}, (40, 120), 9000, 1),
]

GPU_QUOTAS = ("vision-train", "vision-dev", "nlp-prod", "nlp-research")
CPU_QUOTAS = ("analytics-etl", "analytics-adhoc", "nlp-research", "vision-dev")
MAX_WAITING = 120
#: A demo job runs this share of its declared runtime (uniform), as in
#: ``queueing.engine.scenarios.demo_world``.
RUNTIME_USAGE = (0.4, 1.0)
#: A job larger than its quota's max is set aside as inadmissible ("can never fit"):
#: the demo shows one now and then, not as the rule -- otherwise another quota is taken.
NEVER_FITS_SHARE = 0.05


def _fits_max(quota: Quota, pods: int, requests: Mapping[str, str]) -> bool:
    """Whether ``pods`` x ``requests`` stays within the quota's max (and its parent's)."""
    at: Quota | None = quota
    while at is not None:
        for resource, limit in (at.max or {}).items():
            if resource in requests and pods * parse_amount(resource, requests[resource]) > int(
                limit
            ):
                return False
        at = at.parent
    return True


#: Every WAVE_PERIOD_S one tenant gets a wave of work for WAVE_S (in turn): its queues
#: fill past its quotas, it borrows what the others leave idle, positions, ETAs and
#: "why pending" have something to say, and the wave drains -- the steady trickle alone
#: keeps the cluster a third busy, with nothing waiting.
#: 1-2 extra jobs a call: with 2-4, the demo offered cpu-only work 102 % of what the 16
#: cpu nodes (496 cores) can run -- the quota tree counts 992 cpu, but half of it sits
#: on tainted GPU nodes -- so a backlog grew whatever the engine did and waits passed
#: ten minutes; with 1-2 it offers 79 % (``scenarios.demo_world(waves=True)``).
WAVE_PERIOD_S = 180
WAVE_S = 45
WAVE_EXTRA = (1, 2)
WAVE_TENANTS: tuple[tuple[str, ...], ...] = (
    ("vision-train", "vision-dev"),
    ("analytics-etl", "analytics-adhoc"),
    ("nlp-prod", "nlp-research"),
)


def wave_quotas(at: float) -> tuple[str, ...]:
    """The quotas of the tenant whose wave runs at ``at`` (epoch seconds), or ()."""
    period, into = divmod(int(at), WAVE_PERIOD_S)
    if into >= WAVE_S:
        return ()
    return WAVE_TENANTS[period % len(WAVE_TENANTS)]


def trickle(
    rng: random.Random | None = None, count: int | None = None, *, at: float | None = None
) -> int:
    """Submit a few demo jobs unless plenty are already waiting; during a wave
    (:func:`wave_quotas`) a few more, into the wave's quotas. Returns how many."""
    rng = rng or random.Random()
    if Workload.objects.filter(phase__in=WAITING_PHASES).count() >= MAX_WAITING:
        return 0
    quotas = {q.name: q for q in Quota.objects.filter(name__in=set(GPU_QUOTAS + CPU_QUOTAS))}
    if not quotas:
        return 0
    wave = wave_quotas(timezone.now().timestamp() if at is None else at) if count is None else ()
    steady = count if count is not None else rng.randint(1, 3)
    extra = rng.randint(*WAVE_EXTRA) if wave else 0
    submitted = 0
    for i in range(steady + extra):
        label, pods, requests, (low, high), priority, _w = rng.choices(
            SHAPES, weights=[shape[5] for shape in SHAPES]
        )[0]
        gpu = "nvidia.com/gpu" in requests
        targets: tuple[str, ...] = GPU_QUOTAS if gpu else CPU_QUOTAS
        if i >= steady:
            targets = tuple(n for n in wave if n in targets) or targets
        name = rng.choice(targets)
        quota = quotas.get(name)
        if quota is None:
            continue
        if not _fits_max(quota, pods, requests) and rng.random() >= NEVER_FITS_SHARE:
            fitting = [
                q
                for n in (GPU_QUOTAS if gpu else CPU_QUOTAS)
                if (q := quotas.get(n)) is not None and _fits_max(q, pods, requests)
            ]
            if not fitting:
                continue
            quota = rng.choice(fitting)
        pod_set: dict[str, Any] = {"name": "workers", "count": pods, "requests": requests}
        if gpu:
            pod_set["tolerations"] = [GPU_TOLERATION]
        queue = None
        if quota.name.startswith("nlp") and rng.random() < 0.3:
            queue = Queue.objects.filter(name="nlp-shared").first()
        declared = float(rng.randint(low, high))
        actions.submit_workload(
            Actor.system(),
            tenant=None,
            quota=quota,
            queue=queue,
            # Eight hex digits: a burst submits hundreds in one second (four collided).
            name=f"{label}-{timezone.now():%H%M%S}-{secrets.token_hex(4)}",
            pod_sets=[pod_set],
            priority=priority + rng.randint(0, 200),
            expected_runtime_s=declared,
            # Work ends before its declared limit, by a varying margin: what an ETA has
            # to learn (the engine's eta_calibration benchmark models the same world).
            annotations={SIM_RUNTIME_ANNOTATION: f"{declared * rng.uniform(*RUNTIME_USAGE):.1f}"},
        )
        submitted += 1
    return submitted


def nodes_exist() -> bool:
    return SimNode.objects.exists()

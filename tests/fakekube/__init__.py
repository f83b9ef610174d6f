"""A stateful fake Kubernetes API server for tests, over real HTTP on loopback.

    with FakeKube(time_scale=0.01) as fake:          # or the `fake_kube` fixture
        fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
        batch = kubernetes.client.BatchV1Api(api_client(fake.url))
        ...
        fake.log_entries(types=["suspend", "pod_start", "pod_stop"])

In another process: `python -m tests.fakekube --port 0 --port-file PATH` (or
`FakeKubeProcess`), steered through `/_fake/` (or `RemoteFakeKube`).

- `store`: objects, resourceVersions, write semantics, watch history (410 after compaction).
- `server`: REST routes, watch streams, discovery, `/version`, faults, control endpoints.
- `runner`: the Job controller, scheduler and kubelets for batch/v1 Jobs.
- `audit`: the log of requests and transitions, and usage rebuilt from it.
"""

from .audit import (
    AuditLog,
    admitted_timeline,
    by_job,
    by_label,
    by_namespace,
    overruns,
    peak_usage,
    running_at,
    unsuspend_counts,
    usage_timeline,
)
from .client import FakeKubeProcess, RemoteFakeKube, api_client, write_kubeconfig
from .objects import ApiError, parse_quantity
from .resources import ResourceType
from .runner import FAIL_ANNOTATION, RUNTIME_ANNOTATION
from .server import FakeKube, FaultSpec, ManualClock

__all__ = [
    "FAIL_ANNOTATION",
    "RUNTIME_ANNOTATION",
    "ApiError",
    "AuditLog",
    "FakeKube",
    "FakeKubeProcess",
    "FaultSpec",
    "ManualClock",
    "RemoteFakeKube",
    "ResourceType",
    "admitted_timeline",
    "api_client",
    "by_job",
    "by_label",
    "by_namespace",
    "overruns",
    "parse_quantity",
    "peak_usage",
    "running_at",
    "unsuspend_counts",
    "usage_timeline",
    "write_kubeconfig",
]

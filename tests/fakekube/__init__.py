"""A stateful fake Kubernetes API server for tests, over real HTTP on loopback.

    with FakeKube(time_scale=0.01) as fake:
        api = api_client(fake.url)
        ...

See the README-like docstrings of `server`, `audit` and `runner` for the details.
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

"""The Kubernetes adapter: the only module that imports the kubernetes client.

Reads. ``tick()`` (the sync calls it first, under the sync lease) lists, page by page,
the managed kinds in the managed namespaces, the nodes, the bound pods and the priority
classes, and keeps that view until the next tick. Each sync therefore sees the cluster
as of a moment after the previous sync ended: views never go backwards, which the sync's
repairs rely on (see docs/kubernetes.md). Nothing needs rebuilding when a worker is
killed. The same objects can instead be kept by ``Informer``s, list + watch with resume
from resourceVersion, relist on 410 and bookmarks; the ``watch_cluster`` process runs
them to trigger cycles on events.

Writes. Admission is a merge patch ``suspend: false`` (plus the pool's node selector on
the pod templates), preemption a merge patch ``suspend: true``. Both are idempotent: a
patch that is already applied changes nothing and answers 200. A 409 re-reads the object
and re-applies what is still missing; 429 honours Retry-After; 5xx and timeouts are
retried with jittered exponential backoff within a time budget; whatever is left becomes
a ``ClusterError`` whose ``retryable`` flag tells the caller whether a later sync should
try again. Creates carry an id label, so a create whose answer was lost is found
instead of made twice.

Objects travel as plain JSON (``dict``), never the client's models: one code path for
builtin and custom kinds, and no model deserialisation on large lists.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.watch.watch import iter_resp_lines

from queueing import compat
from queueing.cluster.base import (
    FAILED,
    RUNNING,
    STARTING,
    SUCCEEDED,
    SUSPENDED,
    ClusterError,
    JobInfo,
    JobKey,
    JobNotFound,
    JobRef,
    JobRequest,
    NodeInfo,
)
from queueing.quantities import QuantityError, format_amount, parse_amount

log = logging.getLogger(__name__)

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
PAGE_SIZE = 500
# A view older than this is refreshed before it is read outside a tick.
VIEW_MAX_AGE_S = 1.0
# A kind whose CRD is missing is looked for again after this long.
ABSENT_KIND_RETRY_S = 300.0
# The watch cache: how long to wait for the first list, and how long a failing watch is
# trusted before the view is listed afresh instead.
CACHE_SYNC_TIMEOUT_S = 30.0
CACHE_STALE_S = 5.0
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
RETRYABLE_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
NO_ANSWER = 0  # the status of a request that got no HTTP answer (refused, reset, timed out)


# --- errors and retries ------------------------------------------------------------------


class ApiCallError(Exception):
    """One failed request, before the retry layer decides what it means."""

    def __init__(
        self, status: int, message: str, *, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after

    @property
    def label(self) -> str:
        return str(self.status) if self.status else "timeout"

    @property
    def retryable(self) -> bool:
        return self.status == NO_ANSWER or self.status in RETRYABLE_STATUSES

    def to_cluster_error(self, what: str) -> ClusterError:
        return ClusterError(f"{what}: {self}", retryable=self.retryable, status=self.status or None)


def _error_from_response(status: int, data: bytes, headers: Mapping[str, str]) -> ApiCallError:
    message, reason, retry_after = f"HTTP {status}", "", None
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    if isinstance(body, dict):
        message = str(body.get("message") or message)
        reason = str(body.get("reason") or "")
        details = body.get("details") or {}
        if isinstance(details, dict) and details.get("retryAfterSeconds") is not None:
            with contextlib.suppress(TypeError, ValueError):
                retry_after = float(details["retryAfterSeconds"])
    header = headers.get("Retry-After") if headers else None
    if header is not None:
        with contextlib.suppress(TypeError, ValueError):
            retry_after = float(header)
    return ApiCallError(status, message, reason=reason, retry_after=retry_after)


@dataclass(frozen=True)
class RetryPolicy:
    """How long one call may keep trying, and how it waits between tries."""

    budget_s: float = 20.0  # total time a call may spend retrying
    base_s: float = 0.05  # first backoff; doubles each try
    cap_s: float = 2.0  # longest backoff
    max_retry_after_s: float = 10.0  # a Retry-After longer than this is cut to it
    max_attempts: int = 10

    def backoff(self, attempt: int, rng: random.Random) -> float:
        # Equal jitter: half fixed, half random, so racing workers spread out.
        step = min(self.cap_s, self.base_s * (2**attempt))
        return step / 2 + rng.uniform(0, step / 2)


def _record_api_error(verb: str, label: str) -> None:
    """Count an API error in the shared metrics; never let counting break the call."""
    try:
        from django.db import transaction

        from queueing import metrics

        with transaction.atomic():
            metrics.increment("cluster_api_error", f"{verb} {label}")
    except Exception:  # the database may be down too; the log still says it
        log.debug("could not count an API error (%s %s)", verb, label, exc_info=True)


class Rest:
    """Raw JSON over the official client's ApiClient (auth, TLS, kubeconfig), with the
    retry policy. ``once`` is one request; ``call`` retries what may succeed later."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        timeout_s: float = 30.0,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_error: Callable[[str, str], None] = _record_api_error,
        seed: int | None = None,
    ) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.policy = policy or RetryPolicy()
        self.sleep = sleep
        self.on_error = on_error
        self.rng = random.Random(seed)  # noqa: S311 - backoff jitter, not secrets
        self._stream: Any = None  # the response of the watch in progress, to interrupt it

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeout: float | tuple[float, float] | None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self.api.call_api(
                *params, _request_timeout=timeout or (min(5.0, self.timeout_s), self.timeout_s)
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiCallError(NO_ANSWER, f"{type(exc).__name__}: {exc}") from exc
        except k8s.ApiException as exc:  # the client's wrapper around TLS errors
            raise ApiCallError(exc.status or NO_ANSWER, str(exc.reason)) from exc
        except OSError as exc:
            raise ApiCallError(NO_ANSWER, f"{type(exc).__name__}: {exc}") from exc

    def once(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        """One request; raises ApiCallError for anything but a 2xx answer."""
        response = self._send(method, path, query, body, content_type, None)
        try:
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiCallError(NO_ANSWER, f"{type(exc).__name__}: {exc}") from exc
        if not 200 <= response.status < 300:
            raise _error_from_response(response.status, data, response.headers)
        try:
            return json.loads(data) if data else None
        except ValueError as exc:
            raise ApiCallError(NO_ANSWER, "the API server answered with invalid JSON") from exc

    def count(self, verb: str, err: ApiCallError) -> None:
        self.on_error(verb, err.label)

    def pause(self, err: ApiCallError, attempt: int, deadline: float) -> bool:
        """Wait before the next try; False when the budget does not allow another."""
        if attempt + 1 >= self.policy.max_attempts:
            return False
        wait = self.policy.backoff(attempt, self.rng)
        if err.status == 429 and err.retry_after is not None:
            wait = max(wait, min(err.retry_after, self.policy.max_retry_after_s))
        if time.monotonic() + wait > deadline:
            return False
        self.sleep(wait)
        return True

    def deadline(self) -> float:
        return time.monotonic() + self.policy.budget_s

    def call(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        """A request retried while the error may pass (409, 429, 5xx, no answer).

        Only for requests that are safe to repeat: reads, and writes that are idempotent.
        """
        deadline, attempt = self.deadline(), 0
        while True:
            try:
                return self.once(method, path, query=query, body=body, content_type=content_type)
            except ApiCallError as err:
                self.count(verb, err)
                if not err.retryable or not self.pause(err, attempt, deadline):
                    raise
                attempt += 1

    def list_all(
        self, path: str, query: Mapping[str, Any] | None = None, *, page_size: int = PAGE_SIZE
    ) -> tuple[list[Obj], str]:
        """Every item of a collection, page by page; (items, resourceVersion).

        A continue token that expired (410) restarts the list: the pages of one list are
        one consistent snapshot, so they are never stitched across two.
        """
        restarts = 0
        while True:
            items: list[Obj] = []
            token: str | None = None
            try:
                while True:
                    page = self.call(
                        "list",
                        "GET",
                        path,
                        query={**(query or {}), "limit": page_size, "continue": token},
                    )
                    items.extend(page.get("items") or [])
                    meta = page.get("metadata") or {}
                    token = meta.get("continue") or None
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except ApiCallError as err:
                if err.status == 410 and token and restarts < 3:
                    restarts += 1
                    continue
                raise

    def stream(
        self, path: str, query: Mapping[str, Any], *, read_timeout_s: float
    ) -> Iterator[Obj]:
        """A watch: its events, one JSON object each, until the server ends the stream."""
        response = self._send("GET", path, query, None, None, (5.0, read_timeout_s))
        if response.status != 200:
            data = response.read()
            raise _error_from_response(response.status, data, response.headers)
        raw = response.response
        self._stream = raw
        try:
            for line in iter_resp_lines(raw):
                if line:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        log.warning("ignoring a watch line that is not JSON: %.200s", line)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiCallError(NO_ANSWER, f"watch stream broke: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                raw.release_conn()


# --- JSON helpers ------------------------------------------------------------------------


def _revision(value: Any) -> int | None:
    """A resourceVersion as a number, when it is one (etcd revisions are)."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def dig(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def nested(path: Sequence[str], value: Any) -> Obj:
    """``nested(("spec", "suspend"), True)`` -> ``{"spec": {"suspend": True}}``."""
    out: Any = value
    for part in reversed(path):
        out = {part: out}
    return out


def deep_merge(base: Obj, extra: Mapping[str, Any]) -> Obj:
    """A merge patch of merge patches (``extra`` wins; maps merge, everything else replaces)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def parse_time(value: Any) -> datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _conditions(obj: Obj) -> dict[str, Obj]:
    """True conditions by type."""
    return {
        str(c.get("type")): dict(c)
        for c in dig(obj, "status", "conditions") or []
        if isinstance(c, Mapping) and c.get("status") == "True"
    }


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def pod_requests(pod_spec: Mapping[str, Any] | None) -> dict[str, int]:
    """Canonical requests of one pod, as the scheduler counts them: the sum of its
    containers (and sidecars), at least its largest init container, plus overhead.
    Limits stand in for missing requests, as the API server defaults them."""

    def of(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {str(r): parse_amount(str(r), q) for r, q in merged.items()}

    spec = pod_spec or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in of(container).items():
            total[name] = total.get(name, 0) + amount
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        amounts = of(container)
        if container.get("restartPolicy") == "Always":  # a sidecar runs alongside
            for name, amount in amounts.items():
                total[name] = total.get(name, 0) + amount
        else:
            for name, amount in amounts.items():
                init_peak[name] = max(init_peak.get(name, 0), amount)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    for name, quantity in (spec.get("overhead") or {}).items():
        total[str(name)] = total.get(str(name), 0) + parse_amount(str(name), quantity)
    return {name: amount for name, amount in total.items() if amount}


def _tolerations(pod_spec: Mapping[str, Any]) -> list[dict[str, str]]:
    out = []
    for tol in pod_spec.get("tolerations") or []:
        if isinstance(tol, Mapping):
            out.append(
                {k: str(tol[k]) for k in ("key", "operator", "value", "effect") if tol.get(k)}
            )
    return out


# --- kinds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """A job's state as the cluster reports it, common to every kind."""

    state: str
    suspended: bool
    active: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    message: str = ""


@dataclass(frozen=True)
class PodTemplate:
    """One pod shape of a job: ``count`` pods from ``spec``; ``path`` is where the pod
    template sits in the object (for pinning it to a pool)."""

    name: str
    count: int
    spec: Mapping[str, Any]


class Kind:
    """One suspendable kind. Subclasses say where its suspend flag and pod templates are,
    and how its status reads."""

    kind = ""
    group = ""
    version = ""
    plural = ""
    suspend_path: tuple[str, ...] = ("spec", "suspend")
    # Pod templates inside lists cannot be merge-patched one by one: admission reads the
    # object and writes the changed list back under its resourceVersion.
    admit_reads = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None, sub: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        where = f"/namespaces/{namespace}" if namespace else ""
        tail = f"/{name}" if name else ""
        return f"{base}{where}/{self.plural}{tail}{'/' + sub if sub and name else ''}"

    def ref(self, obj: Obj) -> JobRef:
        meta = obj.get("metadata") or {}
        return JobRef(
            self.kind,
            self.api_version,
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
        )

    def is_suspended(self, obj: Obj) -> bool:
        return bool(dig(obj, *self.suspend_path))

    def suspend_patch(self, suspend: bool) -> Obj:
        return nested(self.suspend_path, suspend)

    def templates(self, obj: Obj) -> list[PodTemplate]:
        raise NotImplementedError

    def observe(self, obj: Obj) -> Observed:
        raise NotImplementedError

    def active_deadline(self, obj: Obj) -> float | None:
        value = dig(obj, "spec", "activeDeadlineSeconds")
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def selector_holds(self, obj: Obj, selector: Mapping[str, str]) -> bool:
        return all(
            selector.items() <= (t.spec.get("nodeSelector") or {}).items()
            for t in self.templates(obj)
        )

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        """A merge patch that adds ``selector`` to every pod template ({} if none needed)."""
        raise NotImplementedError

    def set_suspended(self, body: Obj) -> None:
        node = body
        for part in self.suspend_path[:-1]:
            node = node.setdefault(part, {})
        node[self.suspend_path[-1]] = True

    def priority_class(self, obj: Obj) -> str:
        for template in self.templates(obj):
            name = template.spec.get("priorityClassName")
            if name:
                return str(name)
        return ""


def _pod_spec_patch(selector: Mapping[str, str]) -> Obj:
    return {"template": {"spec": {"nodeSelector": dict(selector)}}}


def _with_selector(template_holder: Mapping[str, Any], selector: Mapping[str, str]) -> Obj:
    """A copy of an object holding ``template.spec``, with ``selector`` added."""
    out = copy.deepcopy(dict(template_holder))
    spec = out.setdefault("template", {}).setdefault("spec", {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
    return out


def _batch_count(job_spec: Mapping[str, Any]) -> int:
    parallelism = _int(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    return max(1, min(parallelism, _int(completions)) if completions is not None else parallelism)


class BatchJob(Kind):
    kind, group, version, plural = "Job", "batch", "v1", "jobs"

    def templates(self, obj: Obj) -> list[PodTemplate]:
        spec = obj.get("spec") or {}
        pod = dig(spec, "template", "spec") or {}
        return [PodTemplate("main", _batch_count(spec), pod)]

    def observe(self, obj: Obj) -> Observed:
        status = obj.get("status") or {}
        true = _conditions(obj)
        started = parse_time(status.get("startTime"))
        active = _int(status.get("active"))
        if "Complete" in true:
            finished = parse_time(status.get("completionTime")) or parse_time(
                true["Complete"].get("lastTransitionTime")
            )
            return Observed(SUCCEEDED, self.is_suspended(obj), active, started, finished)
        if "Failed" in true:
            cond = true["Failed"]
            message = str(cond.get("message") or cond.get("reason") or "The Job failed.")
            finished = parse_time(cond.get("lastTransitionTime"))
            return Observed(FAILED, self.is_suspended(obj), active, started, finished, message)
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        ready = status.get("ready")
        running = _int(ready) > 0 if ready is not None else active > 0
        return Observed(RUNNING if running else STARTING, False, active, started)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        return {"spec": _pod_spec_patch(selector)} if selector else {}


class JobSet(Kind):
    kind, group, version, plural = "JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets"
    admit_reads = True

    def templates(self, obj: Obj) -> list[PodTemplate]:
        out = []
        for i, rj in enumerate(dig(obj, "spec", "replicatedJobs") or []):
            job_spec = dig(rj, "template", "spec") or {}
            count = _int(rj.get("replicas"), 1) * _batch_count(job_spec)
            name = str(rj.get("name") or f"job-{i + 1}")
            out.append(PodTemplate(name, count, dig(job_spec, "template", "spec") or {}))
        return out

    def observe(self, obj: Obj) -> Observed:
        true = _conditions(obj)
        jobs = dig(obj, "status", "replicatedJobsStatus") or []
        active = sum(_int(j.get("active")) for j in jobs if isinstance(j, Mapping))
        ready = sum(_int(j.get("ready")) for j in jobs if isinstance(j, Mapping))
        if "Completed" in true:
            return Observed(
                SUCCEEDED,
                self.is_suspended(obj),
                active,
                None,
                parse_time(true["Completed"].get("lastTransitionTime")),
            )
        if "Failed" in true:
            cond = true["Failed"]
            return Observed(
                FAILED,
                self.is_suspended(obj),
                active,
                None,
                parse_time(cond.get("lastTransitionTime")),
                str(cond.get("message") or "The JobSet failed."),
            )
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        return Observed(RUNNING if ready or active else STARTING, False, active)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        if not selector or obj is None:
            return {}
        # replicatedJobs[].template.spec.template.spec: a list, so the whole list goes back.
        jobs = []
        for rj in dig(obj, "spec", "replicatedJobs") or []:
            rj = copy.deepcopy(rj)
            job_spec = rj.setdefault("template", {}).setdefault("spec", {})
            rj["template"]["spec"] = _with_selector(job_spec, selector)
            jobs.append(rj)
        return {
            "metadata": {"resourceVersion": dig(obj, "metadata", "resourceVersion")},
            "spec": {"replicatedJobs": jobs},
        }


class RayJob(Kind):
    kind, group, version, plural = "RayJob", "ray.io", "v1", "rayjobs"
    admit_reads = True

    def templates(self, obj: Obj) -> list[PodTemplate]:
        cluster = dig(obj, "spec", "rayClusterSpec") or {}
        out = [PodTemplate("head", 1, dig(cluster, "headGroupSpec", "template", "spec") or {})]
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            replicas = group.get("replicas", group.get("minReplicas", 1))
            count = _int(replicas, 1) * _int(group.get("numOfHosts"), 1)
            if count > 0:
                name = str(group.get("groupName") or f"workers-{i + 1}")
                out.append(PodTemplate(name, count, dig(group, "template", "spec") or {}))
        return out

    def observe(self, obj: Obj) -> Observed:
        status = obj.get("status") or {}
        deployment = str(status.get("jobDeploymentStatus") or "")
        job_status = str(status.get("jobStatus") or "")
        started = parse_time(status.get("startTime"))
        finished = parse_time(status.get("endTime"))
        message = str(status.get("message") or "")
        if deployment == "Complete" or job_status == "SUCCEEDED":
            failed = job_status in ("FAILED", "STOPPED")
            return Observed(
                FAILED if failed else SUCCEEDED,
                self.is_suspended(obj),
                0,
                started,
                finished,
                message,
            )
        if deployment == "Failed" or job_status == "FAILED":
            return Observed(
                FAILED,
                self.is_suspended(obj),
                0,
                started,
                finished,
                message or "The RayJob failed.",
            )
        # Its pods go with the RayCluster; until that is torn down they still run.
        active = 0 if deployment in ("", "New", "Suspended") else 1
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        return Observed(RUNNING if deployment == "Running" else STARTING, False, active, started)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        if not selector or obj is None:
            return {}
        cluster = dig(obj, "spec", "rayClusterSpec") or {}
        workers = [_with_selector(g, selector) for g in cluster.get("workerGroupSpecs") or []]
        return {
            "metadata": {"resourceVersion": dig(obj, "metadata", "resourceVersion")},
            "spec": {
                "rayClusterSpec": {
                    "headGroupSpec": _pod_spec_patch(selector),
                    "workerGroupSpecs": workers,
                }
            },
        }


class KubeflowJob(Kind):
    """PyTorchJob and TFJob: replica specs in a map, suspend under runPolicy."""

    group, version = "kubeflow.org", "v1"
    suspend_path = ("spec", "runPolicy", "suspend")
    replica_field = ""

    def templates(self, obj: Obj) -> list[PodTemplate]:
        specs = dig(obj, "spec", self.replica_field) or {}
        return [
            PodTemplate(
                str(rtype).lower(), _int(rs.get("replicas"), 1), dig(rs, "template", "spec") or {}
            )
            for rtype, rs in sorted(specs.items())
            if isinstance(rs, Mapping) and _int(rs.get("replicas"), 1) > 0
        ]

    def observe(self, obj: Obj) -> Observed:
        true = _conditions(obj)
        status = obj.get("status") or {}
        replicas = status.get("replicaStatuses") or {}
        active = sum(_int(r.get("active")) for r in replicas.values() if isinstance(r, Mapping))
        started = parse_time(status.get("startTime"))
        finished = parse_time(status.get("completionTime"))
        if "Succeeded" in true:
            return Observed(SUCCEEDED, self.is_suspended(obj), active, started, finished)
        if "Failed" in true:
            cond = true["Failed"]
            return Observed(
                FAILED,
                self.is_suspended(obj),
                active,
                started,
                finished or parse_time(cond.get("lastTransitionTime")),
                str(cond.get("message") or f"The {self.kind} failed."),
            )
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        running = "Running" in true or active > 0
        return Observed(RUNNING if running else STARTING, False, active, started)

    def active_deadline(self, obj: Obj) -> float | None:
        value = dig(obj, "spec", "runPolicy", "activeDeadlineSeconds")
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def priority_class(self, obj: Obj) -> str:
        value = dig(obj, "spec", "runPolicy", "schedulingPolicy", "priorityClass")
        return str(value) if value else super().priority_class(obj)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        if not selector or obj is None:
            return {}
        names = list((dig(obj, "spec", self.replica_field) or {}).keys())
        return {"spec": {self.replica_field: {n: _pod_spec_patch(selector) for n in names}}}


class PyTorchJob(KubeflowJob):
    kind, plural = "PyTorchJob", "pytorchjobs"
    replica_field = "pytorchReplicaSpecs"
    # Replica types (Master, Worker, ...) vary: admission reads them before patching.
    admit_reads = True


class TFJob(KubeflowJob):
    kind, plural = "TFJob", "tfjobs"
    replica_field = "tfReplicaSpecs"
    admit_reads = True


KINDS: dict[str, Kind] = {
    k.kind: k for k in (BatchJob(), JobSet(), RayJob(), PyTorchJob(), TFJob())
}

# Not jobs, but read (import) and written (status mirroring) through the same layer.
QUEUE_UNITS = ("scheduling.x-k8s.io", "v1alpha1", "queueunits")


def resource_path(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None
) -> str:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{where}/{plural}{'/' + name if name else ''}"


# --- the view: what one refresh saw ------------------------------------------------------


@dataclass
class View:
    """The cluster as one refresh listed it."""

    at: float
    jobs: list[JobInfo]
    nodes: list[NodeInfo]
    queue_units: list[Obj] = field(default_factory=list)


def _occupying(pod: Obj) -> bool:
    return bool(dig(pod, "spec", "nodeName")) and dig(pod, "status", "phase") not in (
        "Succeeded",
        "Failed",
    )


def _controller(obj: Obj) -> Mapping[str, Any] | None:
    for ref in dig(obj, "metadata", "ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


# --- the adapter -------------------------------------------------------------------------


class KubernetesCluster:
    """The Cluster protocol over the Kubernetes API; see the module docstring."""

    mode = "kubernetes"

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        namespaces: Sequence[str] = (),
        kinds: Sequence[str] = tuple(KINDS),
        job_image: str = "busybox:1.36",
        mirror_queue_units: bool = False,
        timeout_s: float = 30.0,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_error: Callable[[str, str], None] = _record_api_error,
        watch_cache: bool = False,
        write_concurrency: int = 1,
    ) -> None:
        self.api = api
        self.rest = Rest(api, timeout_s=timeout_s, policy=policy, sleep=sleep, on_error=on_error)
        # Admissions and preemptions of one cycle are sent this many at a time.
        self.write_concurrency = max(1, int(write_concurrency))
        pool_size = getattr(api.configuration, "connection_pool_maxsize", None) or 0
        if pool_size < self.write_concurrency + 2:
            api.configuration.connection_pool_maxsize = self.write_concurrency + 2
            api.rest_client = type(api.rest_client)(api.configuration)
        # With the watch cache, reads come from informers this process keeps (list once,
        # then watch) instead of a fresh list per tick; see ``_gather``.
        self.watch_cache = watch_cache
        self._watcher: ClusterWatcher | None = None
        self._watcher_pid = 0
        self._watch_epoch = 0
        self._watch_started = 0.0
        self._infos: dict[str, tuple[str, JobInfo]] = {}  # uid -> (resourceVersion, info)
        # Of the last view: managed job uids, batch Job -> controller uid, RayClusters.
        self._ownership: tuple[set[str], dict[str, str], set[tuple[str, str]]] = (
            set(),
            {},
            set(),
        )
        self.namespaces = list(namespaces)
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kinds: {sorted(unknown)}")
        self.kinds = [KINDS[name] for name in kinds]
        self.job_image = job_image
        self.mirror = mirror_queue_units
        self._view: View | None = None
        self._lock = threading.RLock()
        self._absent: dict[str, float] = {}  # kind -> monotonic time it was found missing
        self._priorities: tuple[float, dict[str, int]] | None = None

    @classmethod
    def from_settings(cls) -> KubernetesCluster:
        from django.conf import settings

        return cls(
            connect(settings.KQ_KUBECONFIG or None),
            namespaces=settings.KQ_NAMESPACES,
            kinds=settings.KQ_KINDS,
            job_image=settings.KQ_JOB_IMAGE,
            mirror_queue_units=settings.KQ_MIRROR_QUEUEUNITS,
            timeout_s=settings.KQ_KUBE_TIMEOUT_S,
            policy=RetryPolicy(budget_s=settings.KQ_KUBE_RETRY_S),
            watch_cache=settings.KQ_KUBE_WATCH_CACHE,
            write_concurrency=settings.KQ_KUBE_WRITE_CONCURRENCY,
        )

    @property
    def views_may_lag(self) -> bool:
        """True when reads come from a watch cache, which may be a moment behind the API
        server (and behind what another worker's cache showed): the sync then confirms a
        job stopped with ``fresh_job`` before it gives its quota back."""
        return self.watch_cache

    # --- reads ------------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> int:
        """A real cluster runs jobs by itself; a tick only takes a fresh look at it."""
        self.refresh()
        return 0

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            watcher = self._watching() if self._view is not None else None
            if watcher is not None:
                # Nodes and bound pods straight from the informers; which pods the queue
                # manages is known from the last view (a pod of a job newer than that
                # counts as unmanaged for a moment: less free room, never more).
                return self._node_infos(
                    watcher.nodes.snapshot(), watcher.pods.snapshot(), *self._ownership
                )
        return self._fresh_view().nodes

    def jobs(self) -> list[JobInfo]:
        return self._fresh_view().jobs

    def queue_units(self) -> list[Obj]:
        return self._fresh_view().queue_units

    def _fresh_view(self) -> View:
        with self._lock:
            view = self._view
            if view is None or time.monotonic() - view.at > VIEW_MAX_AGE_S:
                view = self.refresh()
            return view

    def refresh(self) -> View:
        """List everything the sync and the cycle read; keep it as the current view."""
        with self._lock:
            try:
                view = self._list_view()
            except ApiCallError as err:
                raise err.to_cluster_error("listing the cluster failed") from err
            self._view = view
            return view

    def _scopes(self) -> list[str | None]:
        return list(self.namespaces) or [None]

    def list_objects(
        self, group: str, version: str, plural: str, *, cluster_scoped: bool = False
    ) -> list[Obj]:
        """Every object of a collection in the managed namespaces (all, when none are set).

        Raises JobNotFound-free ClusterError; a collection the server does not serve (no
        CRD) answers an empty list."""
        items: list[Obj] = []
        scopes: list[str | None] = [None] if cluster_scoped else self._scopes()
        try:
            for namespace in scopes:
                found, _ = self.rest.list_all(resource_path(group, version, plural, namespace))
                items.extend(found)
        except ApiCallError as err:
            if err.status == 404:
                return []
            raise err.to_cluster_error(f"listing {plural}.{group} failed") from err
        return items

    def _priority_classes(self) -> dict[str, int]:
        cached = self._priorities
        if cached is not None and time.monotonic() - cached[0] < 60:
            return cached[1]
        items, _ = self.rest.list_all("/apis/scheduling.k8s.io/v1/priorityclasses")
        values = {
            str(dig(pc, "metadata", "name")): _int(pc.get("value"))
            for pc in items
            if isinstance(pc.get("value"), int)
        }
        self._priorities = (time.monotonic(), values)
        return values

    def _list_kind(self, kind: Kind) -> list[Obj]:
        missing_since = self._absent.get(kind.kind)
        if missing_since is not None and time.monotonic() - missing_since < ABSENT_KIND_RETRY_S:
            return []
        objects: list[Obj] = []
        for namespace in self._scopes():
            try:
                items, _ = self.rest.list_all(kind.path(namespace))
            except ApiCallError as err:
                if err.status == 404 and kind.kind != "Job":
                    log.info("%s is not served by this cluster (no CRD); skipping it", kind.kind)
                    self._absent[kind.kind] = time.monotonic()
                    return []
                raise
            objects.extend(items)
        self._absent.pop(kind.kind, None)
        return objects

    def _watching(self) -> ClusterWatcher | None:
        """The informers of this process, started (and synced) on first use; None when
        the cache is off or not trustworthy now (then the view is listed afresh)."""
        if not self.watch_cache:
            return None
        if self._watcher is None or self._watcher_pid != os.getpid():
            # A forked worker inherits no threads: it starts informers of its own.
            self._watcher = ClusterWatcher(self, lambda reason: None)
            self._watch_epoch += 1  # cursors of the journal of earlier informers are void
            self._watcher_pid = os.getpid()
            self._watch_started = time.monotonic()
            self._watcher.start()
        # The first reads wait for the informers' first lists; later ones never block on
        # an informer that cannot list (RBAC, a missing CRD's kind): they list instead.
        patience = CACHE_SYNC_TIMEOUT_S - (time.monotonic() - self._watch_started)
        if not self._watcher.wait_synced(max(0.0, patience)):
            log.warning("the watch cache has not synced yet; listing the cluster instead")
            return None
        failing = self._watcher.failing_for()
        if failing > CACHE_STALE_S:
            log.warning("a watch has failed for %.0fs; listing the cluster instead", failing)
            return None
        return self._watcher

    def changed_jobs(
        self, cursor: tuple[int, int] | None
    ) -> tuple[tuple[int, int], set[JobKey] | None]:
        """The watch cache's journal: (a new cursor, the (kind, namespace, name) of every
        job that changed after ``cursor``). The set is None when the caller must look at
        everything: no cursor yet, a cursor of informers since replaced (a forked or
        restarted process), or the cache is off or not trustworthy now."""
        with self._lock:
            watcher = self._watching()
        if watcher is None or self.mirror:  # QueueUnit hints come with full views only
            return (0, 0), None
        epoch = self._watch_epoch
        if cursor is None or cursor[0] != epoch:
            return (epoch, watcher.changed_since(0)[0]), None
        seq, keys = watcher.changed_since(cursor[1])
        return (epoch, seq), keys

    def job_infos(self, keys: set[JobKey]) -> dict[JobKey, JobInfo | None]:
        """The managed jobs among ``keys`` as the cache holds them (None: gone, or not the
        queue's). Their uids join the managed set that node usage is counted with."""
        with self._lock:
            watcher = self._watching()
            if watcher is None:
                raise ClusterError("the watch cache is not available", retryable=True)
            priorities = self._priority_classes()
            found: dict[JobKey, JobInfo | None] = {}
            for key in keys:
                kind = KINDS.get(key[0])
                obj = watcher.find(*key) if kind is not None else None
                found[key] = None
                if kind is None or obj is None:
                    continue
                meta = obj.get("metadata") or {}
                labels = dict(meta.get("labels") or {})
                annotations = dict(meta.get("annotations") or {})
                owned = _controller(obj) is not None and not compat.first_label(
                    labels, compat.QUEUE_LABELS + compat.QUOTA_LABELS
                )
                if owned or not compat.is_managed(labels, annotations, kind.is_suspended(obj)):
                    continue
                info = self._job_info(kind, obj, labels, annotations, priorities)
                found[key] = info
                self._ownership[0].add(info.ref.uid)
            return found

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    def _gather(self) -> tuple[dict[str, list[Obj]], list[Obj], list[Obj]]:
        """The managed kinds' objects, the nodes and the bound pods: from the watch cache
        when it is on and healthy, else listed page by page."""
        watcher = self._watching()
        if watcher is not None:
            return watcher.objects()
        by_kind = {kind.kind: self._list_kind(kind) for kind in self.kinds}
        nodes, _ = self.rest.list_all("/api/v1/nodes")
        pods, _ = self.rest.list_all("/api/v1/pods", {"fieldSelector": BOUND_PODS})
        return by_kind, nodes, pods

    def _list_view(self) -> View:
        priorities = self._priority_classes()
        queue_units = self._list_queue_units() if self.mirror else []
        by_kind, node_objects, pods = self._gather()
        infos: dict[str, tuple[str, JobInfo]] = {}
        by_consumer = {
            (
                str(dig(u, "spec", "consumerRef", "kind")),
                str(dig(u, "spec", "consumerRef", "namespace") or dig(u, "metadata", "namespace")),
                str(dig(u, "spec", "consumerRef", "name")),
            ): u
            for u in queue_units
        }
        jobs: list[JobInfo] = []
        managed_uids: set[str] = set()
        job_owner: dict[str, str] = {}  # uid of a batch Job -> uid of its controller
        ray_clusters: set[tuple[str, str]] = set()
        for kind in self.kinds:
            for obj in by_kind.get(kind.kind, ()):
                meta = obj.get("metadata") or {}
                owner = _controller(obj)
                if owner is not None and kind.kind == "Job":
                    job_owner[str(meta.get("uid"))] = str(owner.get("uid"))
                labels = dict(meta.get("labels") or {})
                annotations = dict(meta.get("annotations") or {})
                unit = by_consumer.get(
                    (kind.kind, str(meta.get("namespace")), str(meta.get("name")))
                )
                if unit is not None:
                    annotations = _queue_unit_hints(unit, annotations)
                # A Job owned by a JobSet (or CronJob) is its parent's business.
                owned = owner is not None and not compat.first_label(
                    labels, compat.QUEUE_LABELS + compat.QUOTA_LABELS
                )
                if owned or not compat.is_managed(labels, annotations, kind.is_suspended(obj)):
                    continue
                # An object unchanged since the last view (same resourceVersion, no
                # QueueUnit hints, same priority classes) keeps its JobInfo.
                uid, rv = str(meta.get("uid")), str(meta.get("resourceVersion") or "")
                memo = f"{rv}@{id(priorities)}" if rv and unit is None else ""
                known = self._infos.get(uid)
                if memo and known is not None and known[0] == memo:
                    info = known[1]
                else:
                    info = self._job_info(kind, obj, labels, annotations, priorities)
                if memo:
                    infos[uid] = (memo, info)
                jobs.append(info)
                managed_uids.add(info.ref.uid)
                if kind.kind == "RayJob" and dig(obj, "status", "rayClusterName"):
                    ray_clusters.add(
                        (info.ref.namespace, str(dig(obj, "status", "rayClusterName")))
                    )
        self._infos = infos
        self._ownership = (managed_uids, job_owner, ray_clusters)
        nodes = self._node_infos(node_objects, pods, managed_uids, job_owner, ray_clusters)
        return View(time.monotonic(), jobs, nodes, queue_units)

    def _list_queue_units(self) -> list[Obj]:
        group, version, plural = QUEUE_UNITS
        try:
            items: list[Obj] = []
            for namespace in self._scopes():
                found, _ = self.rest.list_all(resource_path(group, version, plural, namespace))
                items.extend(found)
            return items
        except ApiCallError as err:
            if err.status == 404:
                return []
            raise

    def _job_info(
        self,
        kind: Kind,
        obj: Obj,
        labels: dict[str, str],
        annotations: dict[str, str],
        priorities: Mapping[str, int],
    ) -> JobInfo:
        observed = kind.observe(obj)
        message = observed.message
        pod_sets: list[dict[str, Any]] = []
        try:
            for template in kind.templates(obj):
                pod_sets.append(
                    {
                        "name": template.name,
                        "count": template.count,
                        "requests": pod_requests(template.spec),
                        "node_selector": dict(template.spec.get("nodeSelector") or {}),
                        "tolerations": _tolerations(template.spec),
                    }
                )
        except QuantityError as exc:
            pod_sets, message = [], f"Its pod requests cannot be read: {exc}"
        priority_class = kind.priority_class(obj)
        priority = priorities.get(priority_class) if priority_class else None
        if priority is None:
            for template in kind.templates(obj):
                if isinstance(template.spec.get("priority"), int):
                    priority = int(template.spec["priority"])
                    break
        meta = obj.get("metadata") or {}
        return JobInfo(
            ref=kind.ref(obj),
            state=observed.state,
            suspended=observed.suspended,
            pod_sets=pod_sets,
            labels=labels,
            annotations=annotations,
            priority=priority,
            priority_class=priority_class,
            expected_runtime_s=compat.expected_runtime(annotations) or kind.active_deadline(obj),
            created_at=parse_time(meta.get("creationTimestamp")),
            started_at=observed.started_at,
            finished_at=observed.finished_at,
            active=observed.active,
            message=message,
        )

    def _node_infos(
        self,
        nodes: list[Obj],
        pods: list[Obj],
        managed: set[str],
        job_owner: Mapping[str, str],
        ray_clusters: set[tuple[str, str]],
    ) -> list[NodeInfo]:
        reserved: dict[str, dict[str, int]] = {}
        for pod in pods:
            if not _occupying(pod) or _pod_is_managed(pod, managed, job_owner, ray_clusters):
                continue
            try:
                requests = pod_requests(pod.get("spec"))
            except QuantityError:
                continue  # the API server would not have admitted it; nothing to count
            bucket = reserved.setdefault(str(dig(pod, "spec", "nodeName")), {})
            requests["pods"] = requests.get("pods", 0) + 1
            for resource, amount in requests.items():
                bucket[resource] = bucket.get(resource, 0) + amount
        return [
            _node_info(node, reserved.get(str(dig(node, "metadata", "name")), {})) for node in nodes
        ]

    # --- writes -----------------------------------------------------------------------------

    def _kind(self, ref: JobRef) -> Kind:
        kind = KINDS.get(ref.kind)
        if kind is None:
            raise ClusterError(f"{ref.kind} is not a kind Koord-Queue manages", retryable=False)
        return kind

    def _get(self, kind: Kind, ref: JobRef) -> Obj:
        try:
            obj = self.rest.call("get", "GET", kind.path(ref.namespace, ref.name))
        except ApiCallError as err:
            if err.status == 404:
                raise JobNotFound(f"{ref.kind} {ref.namespace}/{ref.name} is gone") from err
            raise err.to_cluster_error(f"reading {ref.kind} {ref.namespace}/{ref.name}") from err
        if ref.uid and dig(obj, "metadata", "uid") != ref.uid:
            raise JobNotFound(
                f"{ref.kind} {ref.namespace}/{ref.name} was replaced by another object"
            )
        return obj

    def fresh_job(self, ref: JobRef) -> JobInfo:
        """The job as the API server has it now (a read, not the view); JobNotFound when
        it is gone."""
        kind = self._kind(ref)
        obj = self._get(kind, ref)
        meta = obj.get("metadata") or {}
        return self._job_info(
            kind,
            obj,
            dict(meta.get("labels") or {}),
            dict(meta.get("annotations") or {}),
            self._priority_classes(),
        )

    def _converge(
        self, verb: str, kind: Kind, ref: JobRef, needed: Callable[[Obj | None], Obj | None]
    ) -> None:
        """Patch until the object needs nothing more.

        ``needed(obj)`` returns the merge patch still missing, or None when ``obj`` is
        already as wanted; ``obj`` is None on the first, blind try of kinds whose patch
        does not depend on their content. A 409 or 422 re-reads the object and asks again,
        so a patch that was applied meanwhile (by an earlier try whose answer was lost, or
        by another worker) is not repeated.
        """
        obj = self._get(kind, ref) if kind.admit_reads and verb == "admit" else None
        deadline, attempt, invalid = self.rest.deadline(), 0, 0
        where = f"{verb} {ref.kind} {ref.namespace}/{ref.name}"
        while True:
            patch = needed(obj)
            if patch is None:
                return
            try:
                patched = self.rest.once(
                    "PATCH",
                    kind.path(ref.namespace, ref.name),
                    body=patch,
                    content_type=MERGE_PATCH,
                )
                if self._watcher is not None and isinstance(patched, dict):
                    self._watcher.put(kind.kind, patched)
                return
            except ApiCallError as err:
                self.rest.count("patch", err)
                if err.status == 404:
                    raise JobNotFound(f"{ref.kind} {ref.namespace}/{ref.name} is gone") from err
                if err.status == 422:
                    invalid += 1
                    if invalid > 2:
                        raise ClusterError(f"{where}: {err}", retryable=True, status=422) from err
                elif not err.retryable:
                    raise err.to_cluster_error(where) from err
                if not self.rest.pause(err, attempt, deadline):
                    raise err.to_cluster_error(where) from err
                attempt += 1
                if err.status in (409, 422) or kind.admit_reads:
                    obj = self._get(kind, ref)

    def admit(self, ref: JobRef, *, node_selector: Mapping[str, str]) -> None:
        """Unsuspend, pinned to the pool; idempotent. A missing object raises JobNotFound."""
        kind = self._kind(ref)
        selector = dict(node_selector)

        def needed(obj: Obj | None) -> Obj | None:
            if obj is not None and not kind.is_suspended(obj):
                # Unsuspended already (by an earlier try whose answer was lost, or another
                # worker): admitted is admitted; a started job's templates cannot change.
                return None
            patch: Obj = {"metadata": {"annotations": {compat.MANAGED_ANNOTATION: "true"}}}
            if ref.uid:
                patch["metadata"]["uid"] = ref.uid  # a precondition: never admit a namesake
            patch = deep_merge(patch, kind.suspend_patch(False))
            if obj is None or not kind.selector_holds(obj, selector):
                patch = deep_merge(patch, kind.selector_patch(obj, selector))
            return patch

        self._converge("admit", kind, ref, needed)

    def suspend(self, ref: JobRef) -> None:
        """Suspend (its pods stop); idempotent. A missing object raises JobNotFound."""
        kind = self._kind(ref)

        def needed(obj: Obj | None) -> Obj | None:
            if obj is not None and kind.is_suspended(obj):
                return None
            patch = kind.suspend_patch(True)
            if ref.uid:
                patch = deep_merge(patch, {"metadata": {"uid": ref.uid}})
            return patch

        self._converge("suspend", kind, ref, needed)

    def delete(self, ref: JobRef) -> None:
        """Delete with its pods; a missing object (or a namesake) is fine."""
        kind = self._kind(ref)
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if ref.uid:
            body["preconditions"] = {"uid": ref.uid}
        deadline, attempt = self.rest.deadline(), 0
        while True:
            try:
                self.rest.once("DELETE", kind.path(ref.namespace, ref.name), body=body)
                return
            except ApiCallError as err:
                if err.status == 404:
                    return  # gone already: what we wanted, not an error
                self.rest.count("delete", err)
                if err.status == 409:  # a namesake (uid precondition), or a passing conflict
                    try:
                        self._get(kind, ref)
                    except JobNotFound:
                        return
                elif not err.retryable:
                    raise err.to_cluster_error(f"delete {ref.namespace}/{ref.name}") from err
                if not self.rest.pause(err, attempt, deadline):
                    raise err.to_cluster_error(f"delete {ref.namespace}/{ref.name}") from err
                attempt += 1

    def create_job(self, request: JobRequest) -> JobRef:
        """Create the job suspended: from the caller's manifest (a pod template, a Job or
        another managed kind), or a batch Job from the single pod set."""
        kind, body = self._manifest(request)
        create_id = uuid.uuid4().hex[:24]
        meta = body.setdefault("metadata", {})
        meta["namespace"] = request.namespace
        meta["labels"] = {
            **(meta.get("labels") or {}),
            **request.labels,
            compat.CREATE_ID_LABEL: create_id,
        }
        annotations = {**(meta.get("annotations") or {}), **request.annotations}
        if request.expected_runtime_s and compat.expected_runtime(annotations) is None:
            annotations["koord-queue/" + compat.RUNTIME_KEY] = f"{request.expected_runtime_s:g}"
        meta["annotations"] = annotations
        if request.name:
            meta["name"] = request.name
            meta.pop("generateName", None)
        elif not meta.get("name") and not meta.get("generateName"):
            raise ClusterError("a job needs a name or a generateName", retryable=False, status=422)
        kind.set_suspended(body)
        if request.priority_class:
            for template in kind.templates(body):
                if isinstance(template.spec, dict):
                    template.spec.setdefault("priorityClassName", request.priority_class)
        return kind.ref(self._create(kind, request.namespace, body, create_id))

    def _manifest(self, request: JobRequest) -> tuple[Kind, Obj]:
        manifest = copy.deepcopy(dict(request.manifest)) if request.manifest else None
        if manifest is not None and manifest.get("kind") not in (None, "", "PodTemplate"):
            kind = KINDS.get(str(manifest["kind"]))
            if kind is None:
                raise ClusterError(
                    f"{manifest['kind']} is not a kind Koord-Queue can create", retryable=False
                )
            manifest["apiVersion"] = manifest.get("apiVersion") or kind.api_version
            if kind.kind == "Job":
                self._check_job_shape(manifest, request)
            return kind, manifest
        if len(request.pod_sets) != 1:
            raise ClusterError(
                "a batch Job runs one pod shape; give a JobSet manifest for several pod sets",
                retryable=False,
            )
        pod_set = request.pod_sets[0]
        count = int(pod_set.get("count", 1))
        if manifest is not None:  # a pod template: {"metadata": ..., "spec": {...}}
            template = (
                manifest.get("template") if manifest.get("kind") == "PodTemplate" else manifest
            )
            template = copy.deepcopy(dict(template or {}))
        else:
            runtime = int(request.expected_runtime_s or 60)
            template = {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": self.job_image,
                            "command": ["sh", "-c", f"sleep {runtime}"],
                        }
                    ],
                }
            }
        spec = template.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Never")
        containers = spec.get("containers") or []
        if containers and not any((c.get("resources") or {}).get("requests") for c in containers):
            first = containers[0]
            first.setdefault("resources", {})["requests"] = {
                name: format_amount(name, int(amount))
                for name, amount in (pod_set.get("requests") or {}).items()
            }
        if pod_set.get("node_selector"):
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **pod_set["node_selector"]}
        if pod_set.get("tolerations"):
            spec["tolerations"] = [*(spec.get("tolerations") or []), *pod_set["tolerations"]]
        job: Obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {},
            "spec": {"parallelism": count, "completions": count, "template": template},
        }
        self._check_job_shape(job, request)
        return KINDS["Job"], job

    def _check_job_shape(self, job: Obj, request: JobRequest) -> None:
        """The queue accounts the workload's pod sets; the Job must ask for the same."""
        if len(request.pod_sets) != 1:
            return
        pod_set = request.pod_sets[0]
        template = BatchJob().templates(job)[0]
        try:
            actual = pod_requests(template.spec)
        except QuantityError as exc:
            raise ClusterError(
                f"the Job's requests cannot be read: {exc}", retryable=False
            ) from exc
        wanted = {k: int(v) for k, v in (pod_set.get("requests") or {}).items() if int(v)}
        if actual != wanted or template.count != int(pod_set.get("count", 1)):
            raise ClusterError(
                f"the Job asks for {template.count} pod(s) of {actual}, but the workload for "
                f"{pod_set.get('count', 1)} of {wanted}",
                retryable=False,
                status=422,
            )

    def _create(self, kind: Kind, namespace: str, body: Obj, create_id: str) -> Obj:
        path = kind.path(namespace)
        deadline, attempt = self.rest.deadline(), 0
        name = dig(body, "metadata", "name")
        while True:
            try:
                return dict(self.rest.once("POST", path, body=body))
            except ApiCallError as err:
                self.rest.count("create", err)
                if err.status == 409 and err.reason == "AlreadyExists":
                    found = self._created_by(kind, namespace, name, create_id)
                    if found is not None:
                        return found  # an earlier try of ours went through
                    raise ClusterError(
                        f"{kind.kind} {namespace}/{name} already exists",
                        retryable=False,
                        status=409,
                    ) from err
                if not err.retryable:
                    raise err.to_cluster_error(f"create {kind.kind} in {namespace}") from err
                # Ambiguous: the write may have happened before the error. Look first.
                found = self._created_by(kind, namespace, name, create_id)
                if found is not None:
                    return found
                if not self.rest.pause(err, attempt, deadline):
                    raise err.to_cluster_error(f"create {kind.kind} in {namespace}") from err
                attempt += 1

    def _created_by(
        self, kind: Kind, namespace: str, name: str | None, create_id: str
    ) -> Obj | None:
        try:
            if name:
                obj = self.rest.call("get", "GET", kind.path(namespace, name))
                labels = dig(obj, "metadata", "labels") or {}
                return dict(obj) if labels.get(compat.CREATE_ID_LABEL) == create_id else None
            items, _ = self.rest.list_all(
                kind.path(namespace), {"labelSelector": f"{compat.CREATE_ID_LABEL}={create_id}"}
            )
            return dict(items[0]) if items else None
        except ApiCallError as err:
            if err.status == 404:
                return None
            raise err.to_cluster_error(f"looking for a created {kind.kind}") from err

    # --- kube-queue QueueUnits ---------------------------------------------------------------

    def mirror_queue_units(self, phases: Mapping[JobKey, tuple[str, str]]) -> int:
        """Write kube-queue phases into QueueUnits so ``kubectl get queueunits`` keeps
        working: ``phases`` maps (kind, namespace, name) of a job to (phase, message).
        Creates the QueueUnit of a managed job that has none. Returns objects written."""
        group, version, plural = QUEUE_UNITS
        units = {
            (
                str(dig(u, "spec", "consumerRef", "kind")),
                str(dig(u, "spec", "consumerRef", "namespace") or dig(u, "metadata", "namespace")),
                str(dig(u, "spec", "consumerRef", "name")),
            ): u
            for u in self.queue_units()  # listed with the jobs, at the start of this sync
        }
        jobs = {(j.ref.kind, j.ref.namespace, j.ref.name): j for j in self.jobs()}
        written = 0
        for key, (phase, message) in phases.items():
            unit = units.get(key)
            try:
                if unit is None:
                    job = jobs.get(key)
                    if job is None:
                        continue
                    unit = self.rest.call(
                        "create",
                        "POST",
                        resource_path(group, version, plural, key[1]),
                        body=_queue_unit_for(job),
                    )
                    written += 1
                if (
                    dig(unit, "status", "phase") == phase
                    and dig(unit, "status", "message") == message
                ):
                    continue
                self.rest.call(
                    "patch",
                    "PATCH",
                    resource_path(
                        group, version, plural, key[1], str(dig(unit, "metadata", "name"))
                    )
                    + "/status",
                    body={"status": {"phase": phase, "message": message}},
                    content_type=MERGE_PATCH,
                )
                written += 1
            except ApiCallError as err:
                if err.status in (404, 409):
                    continue  # gone meanwhile, or created by someone else: the next sync sees it
                raise err.to_cluster_error("mirroring QueueUnit phases") from err
        return written


def _queue_unit_hints(unit: Obj, annotations: dict[str, str]) -> dict[str, str]:
    """A kube-queue QueueUnit names the queue and priority of its job; use them when the
    job does not say itself."""
    out = dict(annotations)
    queue = dig(unit, "spec", "queue")
    if queue and compat.annotation(out, compat.QUEUE_KEY) is None:
        out["kube-queue/" + compat.QUEUE_KEY] = str(queue)
    priority = dig(unit, "spec", "priority")
    if isinstance(priority, int) and compat.annotation(out, compat.PRIORITY_KEY) is None:
        out["kube-queue/" + compat.PRIORITY_KEY] = str(priority)
    return out


def _queue_unit_for(job: JobInfo) -> Obj:
    total: dict[str, int] = {}
    for pod_set in job.pod_sets:
        for resource, amount in (pod_set.get("requests") or {}).items():
            total[resource] = total.get(resource, 0) + int(amount) * int(pod_set.get("count", 1))
    spec: Obj = {
        "consumerRef": {
            "apiVersion": job.ref.api_version,
            "kind": job.ref.kind,
            "name": job.ref.name,
            "namespace": job.ref.namespace,
        },
        "resource": {name: format_amount(name, amount) for name, amount in sorted(total.items())},
    }
    queue = compat.queue_name(job.labels, job.annotations)
    if queue:
        spec["queue"] = queue
    if job.priority is not None:
        spec["priority"] = job.priority
    if job.priority_class:
        spec["priorityClassName"] = job.priority_class
    name = f"{job.ref.name}-{job.ref.kind.lower()}"[:253]
    return {
        "apiVersion": "/".join(QUEUE_UNITS[:2]),
        "kind": "QueueUnit",
        "metadata": {
            "name": name,
            "namespace": job.ref.namespace,
            "labels": {compat.MANAGED_ANNOTATION: "true"},
            # Deleted with its job by the garbage collector.
            "ownerReferences": [
                {
                    "apiVersion": job.ref.api_version,
                    "kind": job.ref.kind,
                    "name": job.ref.name,
                    "uid": job.ref.uid,
                }
            ],
        },
        "spec": spec,
    }


def _pod_is_managed(
    pod: Obj, managed: set[str], job_owner: Mapping[str, str], ray_clusters: set[tuple[str, str]]
) -> bool:
    """Pods of managed jobs are accounted by their workloads, not as reserved capacity."""
    owner = _controller(pod)
    if owner is not None:
        uid = str(owner.get("uid"))
        if uid in managed or job_owner.get(uid) in managed:
            return True
    cluster = (dig(pod, "metadata", "labels") or {}).get("ray.io/cluster")
    return bool(cluster) and (str(dig(pod, "metadata", "namespace")), str(cluster)) in ray_clusters


def _node_info(node: Obj, reserved: Mapping[str, int]) -> NodeInfo:
    meta = node.get("metadata") or {}
    allocatable: dict[str, int] = {}
    for resource, quantity in (dig(node, "status", "allocatable") or {}).items():
        try:
            allocatable[str(resource)] = parse_amount(str(resource), quantity)
        except QuantityError:
            log.warning(
                "node %s: cannot read allocatable %s=%r", meta.get("name"), resource, quantity
            )
    conditions = dig(node, "status", "conditions") or []
    ready = next(
        (
            c.get("status") == "True"
            for c in conditions
            if isinstance(c, Mapping) and c.get("type") == "Ready"
        ),
        True,
    )
    taints = [
        {
            "key": str(t.get("key", "")),
            "value": str(t.get("value", "")),
            "effect": str(t.get("effect", "")),
        }
        for t in dig(node, "spec", "taints") or []
        if isinstance(t, Mapping)
    ]
    return NodeInfo(
        name=str(meta.get("name")),
        allocatable=allocatable,
        reserved=dict(reserved),
        labels=dict(meta.get("labels") or {}),
        taints=taints,
        unschedulable=bool(dig(node, "spec", "unschedulable")) or not ready,
    )


def connect(kubeconfig: str | None = None, *, user_agent: str = "koord-queue") -> k8s.ApiClient:
    """An ApiClient from a kubeconfig file, or the in-cluster service account.

    urllib3's own retries are off: the retry layer above decides, counts and logs."""
    configuration = k8s.Configuration()
    try:
        if kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
    except (k8s_config.ConfigException, OSError) as exc:
        where = f"the kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account"
        raise ClusterError(
            f"cannot reach Kubernetes through {where}: {exc}", retryable=False
        ) from exc
    configuration.retries = False
    api = k8s.ApiClient(configuration)
    api.user_agent = user_agent
    return api


# --- list + watch ------------------------------------------------------------------------


Handler = Callable[[str, Obj, Obj | None], None]


class Informer:
    """One collection kept in memory: a paginated list, then a watch from its
    resourceVersion. Bookmarks move the resourceVersion on without changes; a watch that
    ends is resumed from where it stopped; 410 Gone (history compacted) relists, and the
    relist reports what changed meanwhile as ADDED / MODIFIED / DELETED.

    ``on_event(type, obj, old)`` is called for every change, under no lock of ours.
    """

    def __init__(
        self,
        rest: Rest,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        on_event: Handler | None = None,
        watch_timeout_s: int = 300,
        name: str = "",
        optional: bool = False,
    ) -> None:
        self.rest = rest
        self.path = path
        #: A collection that may not be served at all (a custom kind without its CRD).
        self.optional = optional
        self.query = dict(query or {})
        self.on_event = on_event
        self.watch_timeout_s = watch_timeout_s
        self.name = name or path
        self.objects: dict[str, Obj] = {}
        self.resource_version = ""
        self.relists = 0
        self.watches = 0
        self.bookmarks = 0
        self.synced = threading.Event()
        self.failing_since: float | None = None  # monotonic time of the first failure in a row
        self._lock = threading.Lock()
        self._response: Any = None

    @staticmethod
    def key(obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or ''}/{meta.get('name')}"

    def snapshot(self) -> list[Obj]:
        with self._lock:
            return list(self.objects.values())

    def get(self, key: str) -> Obj | None:
        """One object by ``namespace/name``."""
        with self._lock:
            return self.objects.get(key)

    def put(self, obj: Obj) -> None:
        """Write-through: an object as a write of ours returned it, so that this process
        reads its own writes before the watch brings them. An older copy never replaces
        a newer one (resourceVersions compared as numbers, as etcd revisions are)."""
        key = self.key(obj)
        with self._lock:
            if key not in self.objects:
                return  # not ours to add: creation is the watch's to report
            mine = _revision(dig(obj, "metadata", "resourceVersion"))
            held = _revision(dig(self.objects[key], "metadata", "resourceVersion"))
            if mine is not None and held is not None and mine > held:
                self.objects[key] = obj

    def relist(self) -> None:
        items, rv = self.rest.list_all(self.path, self.query)
        fresh = {self.key(o): o for o in items}
        with self._lock:
            old, self.objects, self.resource_version = self.objects, fresh, rv
        self.relists += 1
        self.failing_since = None
        self.synced.set()
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._emit("ADDED", obj, None)
            elif dig(before, "metadata", "resourceVersion") != dig(
                obj, "metadata", "resourceVersion"
            ):
                self._emit("MODIFIED", obj, before)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj, obj)

    def _emit(self, type_: str, obj: Obj, old: Obj | None) -> None:
        if self.on_event is not None:
            try:
                self.on_event(type_, obj, old)
            except Exception:
                log.exception("%s: a watch handler failed", self.name)

    def watch_once(self, stop: threading.Event | None = None) -> int:
        """One watch request from the current resourceVersion (listing first if there is
        none); returns the number of changes applied. 410 relists and returns."""
        if not self.resource_version:
            self.relist()
        query = {
            **self.query,
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout_s,
        }
        applied = 0
        self.watches += 1
        try:
            for event in self.rest.stream(
                self.path, query, read_timeout_s=self.watch_timeout_s + 30
            ):
                if stop is not None and stop.is_set():
                    break
                self.failing_since = None
                type_, obj = event.get("type"), event.get("object") or {}
                if type_ == "ERROR":
                    if obj.get("code") == 410:
                        log.info("%s: watch history expired; relisting", self.name)
                        self.relist()
                        return applied
                    raise ApiCallError(_int(obj.get("code"), 500), str(obj.get("message")))
                rv = str(dig(obj, "metadata", "resourceVersion") or "")
                if type_ == "BOOKMARK":
                    self.bookmarks += 1
                    if rv:
                        self.resource_version = rv
                    continue
                key = self.key(obj)
                with self._lock:
                    old = self.objects.get(key)
                    if type_ == "DELETED":
                        self.objects.pop(key, None)
                    else:
                        self.objects[key] = obj
                    if rv:
                        self.resource_version = rv
                applied += 1
                self._emit(str(type_), obj, old)
        except ApiCallError as err:
            if err.status == 410:
                self.relist()
                return applied
            raise
        return applied

    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set, backing off after errors."""
        failures = 0
        while not stop.is_set():
            try:
                self.watch_once(stop)
                failures = 0
            except ApiCallError as err:
                if stop.is_set():
                    return  # we closed the stream ourselves
                if err.status == 404 and self.optional:
                    # A kind the cluster does not serve (no CRD): an empty collection,
                    # not a failure; looked for again every ABSENT_KIND_RETRY_S.
                    log.info("%s is not served by this cluster (no CRD)", self.name)
                    with self._lock:
                        self.objects, self.resource_version = {}, ""
                    self.failing_since = None
                    self.synced.set()
                    stop.wait(ABSENT_KIND_RETRY_S)
                    continue
                self.rest.count("watch", err)
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                failures += 1
                wait = self.rest.policy.backoff(min(failures, 8), self.rest.rng)
                if err.status == 429 and err.retry_after:
                    wait = max(wait, min(err.retry_after, self.rest.policy.max_retry_after_s))
                log.warning("%s: watch failed (%s); retrying in %.1fs", self.name, err, wait)
                stop.wait(wait)
            except Exception:
                log.exception("%s: watch loop error", self.name)
                stop.wait(1.0)

    def close(self) -> None:
        response = getattr(self.rest, "_stream", None)
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()


class ClusterWatcher:
    """The long-lived watch: informers for the managed kinds, nodes and bound pods, one
    thread each. ``on_change(reason)`` fires when something happened that can change a
    decision (a job finished, appeared, vanished or changed state; a node or capacity
    changed), so a cycle can follow at once instead of at the next timer tick."""

    def __init__(
        self,
        cluster: KubernetesCluster,
        on_change: Callable[[str], None],
        *,
        watch_timeout_s: int = 300,
    ) -> None:
        self.cluster = cluster
        self.on_change = on_change
        self.stop_event = threading.Event()
        self.informers: list[Informer] = []
        self.job_informers: dict[tuple[str, str], Informer] = {}  # (kind, namespace)
        # The journal: (kind, namespace, name) of every job event -> its sequence number.
        self.changed_at: dict[JobKey, int] = {}
        self.seq = 0
        self._journal_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        # Every watch holds a connection open: a pool of their own, one per informer.
        streams = len(cluster.kinds) * len(cluster._scopes()) + 2
        configuration = copy.copy(cluster.api.configuration)
        configuration.connection_pool_maxsize = streams + 2
        self.api = k8s.ApiClient(configuration)
        self.api.user_agent = f"{cluster.api.user_agent} (watch)"
        # Each informer owns its stream; they share nothing but the retry policy.
        for kind in cluster.kinds:
            for namespace in cluster._scopes():
                informer = Informer(
                    self._rest(),
                    kind.path(namespace),
                    on_event=self._job_event(kind),
                    watch_timeout_s=watch_timeout_s,
                    name=f"{kind.kind}@{namespace or '*'}",
                    optional=kind.kind != "Job",
                )
                self.informers.append(informer)
                self.job_informers[(kind.kind, namespace or "")] = informer
        self.nodes = Informer(
            self._rest(),
            "/api/v1/nodes",
            on_event=self._node_event,
            watch_timeout_s=watch_timeout_s,
            name="nodes",
        )
        self.pods = Informer(
            self._rest(),
            "/api/v1/pods",
            query={"fieldSelector": BOUND_PODS},
            on_event=self._pod_event,
            watch_timeout_s=watch_timeout_s,
            name="pods",
        )
        self.informers += [self.nodes, self.pods]

    def _rest(self) -> Rest:
        base = self.cluster.rest
        return Rest(
            self.api,
            timeout_s=base.timeout_s,
            policy=base.policy,
            sleep=base.sleep,
            on_error=base.on_error,
        )

    def changed_since(self, cursor: int) -> tuple[int, set[JobKey]]:
        """(the current sequence number, the jobs changed after ``cursor``).

        The journal has one reader (the sync of this process), whose cursors only move
        on: what it has been given is dropped, so the journal holds only what is new."""
        with self._journal_lock:
            seq = self.seq
            changed = {key for key, at in self.changed_at.items() if at > cursor}
            if cursor:
                self.changed_at = {key: self.changed_at[key] for key in changed}
        return seq, changed

    def _job_event(self, kind: Kind) -> Handler:
        def handle(type_: str, obj: Obj, old: Obj | None) -> None:
            meta = obj.get("metadata") or {}
            key = (kind.kind, str(meta.get("namespace") or ""), str(meta.get("name")))
            with self._journal_lock:
                self.seq += 1
                self.changed_at[key] = self.seq
            labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
            if not compat.is_managed(labels, annotations, kind.is_suspended(obj)) and (
                old is None or not kind.is_suspended(old)
            ):
                return
            if type_ in ("ADDED", "DELETED"):
                self.on_change(f"{kind.kind} {type_.lower()}")
                return
            now, before = kind.observe(obj), kind.observe(old) if old else None
            if before is None or (now.state, now.suspended, now.active) != (
                before.state,
                before.suspended,
                before.active,
            ):
                self.on_change(f"{kind.kind} {now.state.lower()}")

        return handle

    def _node_event(self, type_: str, obj: Obj, old: Obj | None) -> None:
        if old is not None and type_ == "MODIFIED":
            same = _node_info(obj, {}) == _node_info(old, {})
            if same:
                return  # heartbeats and status noise
        self.on_change(f"node {type_.lower()}")

    def _pod_event(self, type_: str, obj: Obj, old: Obj | None) -> None:
        if type_ == "MODIFIED" and old is not None and _occupying(obj) == _occupying(old):
            return
        self.on_change("capacity")

    def start(self) -> None:
        self.stop_event.clear()
        for informer in self.informers:
            thread = threading.Thread(
                target=informer.run,
                args=(self.stop_event,),
                daemon=True,
                name=f"watch-{informer.name}",
            )
            thread.start()
            self._threads.append(thread)

    def objects(self) -> tuple[dict[str, list[Obj]], list[Obj], list[Obj]]:
        """What the informers hold now: objects per managed kind, nodes, bound pods."""
        by_kind: dict[str, list[Obj]] = {}
        for (kind, _namespace), informer in self.job_informers.items():
            by_kind.setdefault(kind, []).extend(informer.snapshot())
        return by_kind, self.nodes.snapshot(), self.pods.snapshot()

    def find(self, kind: str, namespace: str, name: str) -> Obj | None:
        informer = self.job_informers.get((kind, namespace)) or self.job_informers.get((kind, ""))
        return informer.get(f"{namespace}/{name}") if informer is not None else None

    def put(self, kind: str, obj: Obj) -> None:
        """Write-through of an object a write of ours returned."""
        namespace = str(dig(obj, "metadata", "namespace") or "")
        informer = self.job_informers.get((kind, namespace)) or self.job_informers.get((kind, ""))
        if informer is not None:
            informer.put(obj)

    def failing_for(self) -> float:
        """Seconds the longest-failing informer has been failing (0 when all are well)."""
        since = [i.failing_since for i in self.informers if i.failing_since is not None]
        return time.monotonic() - min(since) if since else 0.0

    def wait_synced(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.informers)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.stop_event.set()
        for informer in self.informers:
            informer.close()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()
        self.api.close()

"""Writes: admission, suspension, deletion and creation of jobs.

Admission is a merge patch ``suspend: false`` (plus the pool's node selector on the pod
templates), preemption a merge patch ``suspend: true``. Both are idempotent: a patch that
is already applied changes nothing and answers 200. A 409 re-reads the object and
re-applies what is still missing; whatever is left becomes a ``ClusterError`` whose
``retryable`` flag tells the caller whether a later sync should try again. Creates carry
an id label, so a create whose answer was lost is found instead of made twice.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from queueing import compat
from queueing.cluster.base import ClusterError, JobNotFound, JobRef, JobRequest
from queueing.cluster.kubernetes.client import MERGE_PATCH, ApiCallError, Obj, Rest
from queueing.cluster.kubernetes.kinds import (
    KINDS,
    BatchJob,
    Kind,
    deep_merge,
    dig,
    pod_requests,
    resource_path,
)
from queueing.cluster.kubernetes.reader import Reader
from queueing.quantities import QuantityError, format_amount


def now() -> datetime:
    return datetime.now(UTC)


def enqueued_annotations(at: datetime) -> dict[str, str]:
    """What koord-queue's job extensions write when a job enters the queue."""
    return {
        **compat.stamp_annotations(compat.ENQUEUED_KEY, "true"),
        **compat.stamp_annotations(compat.ENQUEUE_TIMESTAMP_KEY, compat.go_time(at)),
    }


def admitted_annotations(at: datetime) -> dict[str, str | None]:
    """Admission's annotations: ours, the dequeue stamp, and no hold left for a
    kube-queue-patched operator (a merge patch's null removes a key)."""
    return {
        compat.MANAGED_ANNOTATION: "true",
        **{key: None for key in compat.HOLD_ANNOTATIONS},
        **compat.stamp_annotations(compat.DEQUEUE_TIMESTAMP_KEY, compat.go_time(at)),
    }


class Writer:
    """Job writes, each converging on the wanted state however often it is repeated."""

    def __init__(self, rest: Rest, reader: Reader, *, job_image: str = "busybox:1.36") -> None:
        self.rest = rest
        self.reader = reader
        self.job_image = job_image

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
        obj = self.reader.get(kind, ref) if kind.admit_reads and verb == "admit" else None
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
                if isinstance(patched, dict):
                    self.reader.remember(kind, patched)
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
                    obj = self.reader.get(kind, ref)

    def admit(self, ref: JobRef, *, node_selector: Mapping[str, str]) -> None:
        """Unsuspend, pinned to the pool; idempotent. A missing object raises JobNotFound."""
        kind = self.reader.kind_of(ref)
        selector = dict(node_selector)

        def needed(obj: Obj | None) -> Obj | None:
            if obj is not None and not kind.is_suspended(obj):
                # Unsuspended already (by an earlier try whose answer was lost, or another
                # worker): admitted is admitted; a started job's templates cannot change.
                return None
            patch: Obj = {"metadata": {"annotations": admitted_annotations(now())}}
            if ref.uid:
                patch["metadata"]["uid"] = ref.uid  # a precondition: never admit a namesake
            patch = deep_merge(patch, kind.suspend_patch(False))
            if obj is None or not kind.selector_holds(obj, selector):
                patch = deep_merge(patch, kind.selector_patch(obj, selector))
            return patch

        self._converge("admit", kind, ref, needed)

    def suspend(self, ref: JobRef) -> None:
        """Suspend (its pods stop); idempotent. A missing object raises JobNotFound."""
        kind = self.reader.kind_of(ref)

        def needed(obj: Obj | None) -> Obj | None:
            if obj is not None and kind.is_suspended(obj):
                return None
            # koord-queue empties the dequeue stamp of a job it suspends again.
            patch = deep_merge(
                kind.suspend_patch(True),
                {
                    "metadata": {
                        "annotations": compat.stamp_annotations(compat.DEQUEUE_TIMESTAMP_KEY, "")
                    }
                },
            )
            if ref.uid:
                patch = deep_merge(patch, {"metadata": {"uid": ref.uid}})
            return patch

        self._converge("suspend", kind, ref, needed)

    def delete(self, ref: JobRef) -> None:
        """Delete with its pods; a missing object (or a namesake) is fine."""
        kind = self.reader.kind_of(ref)
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
                        self.reader.get(kind, ref)
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
        annotations = {
            **(meta.get("annotations") or {}),
            **request.annotations,
            **enqueued_annotations(now()),
        }
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

    def patch_annotations(
        self, resource: tuple[str, str, str], namespace: str, name: str, values: dict[str, str]
    ) -> None:
        """Merge ``values`` into an object's annotations (idempotent); a missing object
        is nothing to annotate."""
        path = resource_path(*resource, namespace, name)
        try:
            self.rest.call(
                "patch",
                "PATCH",
                path,
                body={"metadata": {"annotations": dict(values)}},
                content_type=MERGE_PATCH,
            )
        except ApiCallError as err:
            if err.status == 404:
                return
            raise err.to_cluster_error(f"annotating {resource[2]} {namespace}/{name}") from err

"""The mutating admission webhook, as plain dict code: an AdmissionReview in, the
AdmissionReview answer out (Kueue's model: a job is suspended at its creation, so no pod
of it ever starts before the queue admits it).

What it does to a CREATE of a managed kind in a managed namespace:

- sets the kind's suspend flag (``spec.suspend``, ``spec.runPolicy.suspend``) when the
  object does not set it, and stamps it enqueued as koord-queue does
  (``koord-queue/job-has-enqueued``, ``…/job-enqueue-timestamp``, both prefixes);
- refuses, with the reason, what the queue cannot hold: a RayJob KubeRay will not suspend
  (see ``kinds.RayJob.refusal``).

It leaves alone what is not the queue's: other operations, other kinds and namespaces,
and a job owned by a controller (a JobSet's Jobs, a CronJob's) unless it names a queue
or quota itself (the reader's rule, ``reader.Reader._list_view``). The HTTP side is
``portal/webhooks.py``; the deployment, TLS and the choice of failurePolicy and
selectors are in docs/deploy.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from queueing import compat
from queueing.cluster.kubernetes.kinds import KINDS, Kind, controller, dig

Obj = dict[str, Any]
REVIEW_VERSION = "admission.k8s.io/v1"


class ReviewError(ValueError):
    """An AdmissionReview this webhook cannot read (answered 400)."""


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _set_path(obj: Mapping[str, Any], path: Sequence[str], value: Any) -> list[Obj]:
    """JSON Patch operations that make ``obj[path] == value``, adding missing parents."""
    node: Any = obj
    for depth, part in enumerate(path):
        if not isinstance(node, Mapping) or part not in node or depth == len(path) - 1:
            rest: Any = value
            for inner in reversed(path[depth + 1 :]):
                rest = {inner: rest}
            pointer = "/" + "/".join(_escape(p) for p in path[: depth + 1])
            exists = isinstance(node, Mapping) and part in node
            return [{"op": "replace" if exists else "add", "path": pointer, "value": rest}]
        node = node[part]
    return []


def _annotation_ops(obj: Mapping[str, Any], wanted: Mapping[str, str]) -> list[Obj]:
    present = dig(obj, "metadata", "annotations")
    if not isinstance(present, Mapping):
        return _set_path(obj, ("metadata", "annotations"), dict(wanted))
    return [
        {"op": "add", "path": f"/metadata/annotations/{_escape(key)}", "value": value}
        for key, value in wanted.items()
        if key not in present
    ]


def mutation(kind: Kind, obj: Mapping[str, Any], now: datetime) -> list[Obj]:
    """The JSON Patch that queues a new object of ``kind`` ([] when it needs none)."""
    ops: list[Obj] = []
    if not kind.is_suspended(dict(obj)):
        ops += _set_path(obj, kind.suspend_path, True)
    stamps = {
        **compat.stamp_annotations(compat.ENQUEUED_KEY, "true"),
        **compat.stamp_annotations(compat.ENQUEUE_TIMESTAMP_KEY, compat.go_time(now)),
    }
    return ops + _annotation_ops(obj, stamps)


def _managed_kind(request: Mapping[str, Any], kinds: Sequence[str]) -> Kind | None:
    what = request.get("kind") or {}
    kind = KINDS.get(str(what.get("kind") or ""))
    if kind is None or kind.kind not in kinds or str(what.get("group") or "") != kind.group:
        return None
    return kind


def _queues_it(
    request: Mapping[str, Any], kind: Kind, namespaces: Sequence[str]
) -> Mapping[str, Any] | None:
    """The object to queue, or None when this request is not the queue's business."""
    if request.get("operation") != "CREATE":
        return None
    namespace = str(request.get("namespace") or "")
    if namespaces and namespace not in namespaces:
        return None
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        raise ReviewError("request.object must be an object")
    labels = dig(obj, "metadata", "labels") or {}
    if controller(dict(obj)) is not None and not compat.first_label(
        labels, compat.QUEUE_LABELS + compat.QUOTA_LABELS
    ):
        return None
    return obj


def review(body: Any, *, namespaces: Sequence[str], kinds: Sequence[str], now: datetime) -> Obj:
    """Answer one AdmissionReview (admission.k8s.io/v1)."""
    if not isinstance(body, Mapping) or body.get("apiVersion") != REVIEW_VERSION:
        raise ReviewError(f"expected an AdmissionReview of {REVIEW_VERSION}")
    request = body.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ReviewError("the AdmissionReview has no request (or no request.uid)")
    response: Obj = {"uid": str(request["uid"]), "allowed": True}
    kind = _managed_kind(request, kinds)
    obj = _queues_it(request, kind, namespaces) if kind is not None else None
    if kind is not None and obj is not None:
        refusal = kind.refusal(dict(obj))
        if refusal:
            response["allowed"] = False
            response["status"] = {"code": 422, "reason": "Invalid", "message": refusal}
        else:
            ops = mutation(kind, obj, now)
            if ops:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": response}

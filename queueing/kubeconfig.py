"""Kubernetes objects as live configuration (issue 12 item 2): with
``KQ_KUBE_LIVE_CONFIG`` on, ElasticQuotas, kube-queue Queues and (for kube-queue's
ResourceQuota plugin) ResourceQuotas are looked at after each sync, at most every
``KQ_KUBE_CONFIG_SYNC_S``, and what changed is applied through the same import as
``manage.py import_kube_queue`` (audited, validated, one transaction, each item in a
savepoint). A quota or queue that comes from an object is *managed in Kubernetes*
(``kube_ref``): the pages and the API refuse to edit it (``actions.kubernetes``), the
object is the place. An object deleted from the cluster deletes its quota or queue when
nothing uses it; one still in use is kept and becomes *managed here* (a rename is a
delete and a create). Off by default: turning it on hands the tree to the cluster.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from queueing import actions, kubeobjects
from queueing.actions import Actor
from queueing.kubequeue import (
    ImportReport,
    KubeQueueObjects,
    import_kube_queue,
    read_objects,
    tree_nodes,
)
from queueing.models import Queue, Quota

log = logging.getLogger(__name__)

DIGEST_KEY = "kq:kube-config:digest"
# Set by the watch process when a configuration object changed: the next sync looks at
# once instead of waiting out KQ_KUBE_CONFIG_SYNC_S.
CHANGED_KEY = "kq:kube-config:changed"
_last: dict[str, float] = {}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


# What the queue writes on these objects itself: not a change of configuration.
OWN_ANNOTATIONS = kubeobjects.OWN_ANNOTATIONS


def _collections(objects: KubeQueueObjects) -> tuple[tuple[str, list[dict[str, Any]]], ...]:
    return (
        ("ElasticQuota", [o for o in objects.elastic_quotas if not kubeobjects.is_ours(o)]),
        ("ElasticQuotaTree", objects.elastic_quota_trees),
        ("Queue", objects.queues),
        ("ResourceQuota", objects.resource_quotas),
    )


def digest(objects: KubeQueueObjects) -> str:
    """What the configuration objects say now: their specs, labels and annotations (not
    their resourceVersions, which the runtime write-back moves on every change; not the
    ElasticQuotas the queue writes itself for quotas managed here, nor its available-queue
    annotations on Namespaces)."""
    seen = sorted(
        ([kind, *kubeobjects.said(o)] for kind, items in _collections(objects) for o in items),
        key=lambda row: json.dumps(row[:3], default=str),
    )
    # Not the available-queue annotations the queue writes on Namespaces itself
    # (queueing/namespacequeues.py; kubeobjects.OWN_ANNOTATIONS): its own write must not
    # read as a change.
    marks = sorted(
        (namespace, {k: v for k, v in notes.items() if k not in kubeobjects.OWN_ANNOTATIONS})
        for namespace, notes in objects.namespace_annotations.items()
    )
    return hashlib.sha256(
        json.dumps([seen, marks, sorted(objects.namespaces)], default=str, sort_keys=True).encode()
    ).hexdigest()


def present_refs(objects: KubeQueueObjects) -> set[str]:
    refs: set[str] = set()
    for kind, items in _collections(objects):
        if kind == "ElasticQuotaTree":
            refs.update(str(node["_kube_ref"]) for node in tree_nodes(items))
            continue
        for obj in items:
            refs.add(f"{kind} {_meta(obj).get('namespace') or ''}/{_meta(obj).get('name')}")
    return refs


def forget_deleted(objects: KubeQueueObjects, report: ImportReport) -> None:
    """Quotas and queues whose object is gone: deleted when unused, else managed here."""
    present = present_refs(objects)
    actor = Actor.system()
    gone_queues = [q for q in Queue.objects.exclude(kube_ref="") if q.kube_ref not in present]
    gone_quotas = [q for q in Quota.objects.exclude(kube_ref="") if q.kube_ref not in present]
    for queue in gone_queues:
        try:
            actions.delete_queue(actor, queue)
            report.add("update", f"queue {queue.name}", f"deleted: {queue.kube_ref} is gone")
        except actions.ActionError as exc:
            actions.set_kube_ref(actor, queue, "")
            report.add("update", f"queue {queue.name}", f"{queue.kube_ref} is gone; kept ({exc})")
    # Children before parents, so a subtree that went away goes in one look.
    for quota in sorted(gone_quotas, key=lambda q: -_depth(q)):
        ref = quota.kube_ref
        try:
            default = quota.default_queue
            actions.delete_quota(actor, quota)
            if default is not None and not default.kube_ref:
                # Its own default queue (made with it) goes too, unless it has a history.
                with contextlib.suppress(actions.ActionError):
                    actions.delete_queue(actor, default)
            report.add("update", f"quota {quota.name}", f"deleted: {ref} is gone")
        except actions.ActionError as exc:
            actions.set_kube_ref(actor, quota, "")
            if quota.namespaces:
                # A rename in the cluster is a delete and a create: the new object's quota
                # takes the namespaces; this one keeps its workloads until they end.
                actions.update_quota(actor, quota, namespaces=[])
            report.add(
                "update", f"quota {quota.name}", f"{ref} is gone; kept, managed here ({exc})"
            )


def _depth(quota: Quota) -> int:
    depth, node = 0, quota
    while node.parent_id is not None:
        depth += 1
        node = Quota.objects.only("parent_id").get(pk=node.parent_id)
    return depth


def mark_changed() -> None:
    """A configuration object changed (the watch saw it): the next sync applies it."""
    cache.set(CHANGED_KEY, time.time(), None)


def sync_config(cluster: Any, clock: Any = time.monotonic) -> ImportReport | None:
    """Apply what changed in the configuration objects; None when nothing was looked at
    or nothing changed."""
    if not getattr(settings, "KQ_KUBE_LIVE_CONFIG", False) or not hasattr(cluster, "list_objects"):
        return None
    now = clock()
    changed = cache.get(CHANGED_KEY) is not None
    if not changed and now - _last.get("at", float("-inf")) < float(
        getattr(settings, "KQ_KUBE_CONFIG_SYNC_S", 5.0)
    ):
        return None
    _last["at"] = now
    if changed:
        # Cleared before reading: a change that lands during the read marks it again.
        cache.delete(CHANGED_KEY)
    objects = read_objects(cluster, queue_units=False)
    mark = digest(objects)
    if cache.get(DIGEST_KEY) == mark:
        return None
    # What is gone first, so that a renamed object's namespaces are free for its new name.
    gone = ImportReport()
    forget_deleted(objects, gone)
    report = import_kube_queue(objects, root_name=getattr(settings, "KQ_KUBE_ROOT", "") or None)
    report.items[:0] = gone.items
    errors = [item.line() for item in report.items if item.verb == "error"]
    if errors:
        log.warning("configuration from Kubernetes, refused: %s", "; ".join(errors))
    else:
        cache.set(DIGEST_KEY, mark, None)  # refused items are tried again next time
    changes = [item.line() for item in report.items if item.verb in ("create", "update")]
    if changes:
        log.info("configuration from Kubernetes: %s", "; ".join(changes))
    return report

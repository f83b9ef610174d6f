"""koord-queue's ``available-queue`` annotation on Namespaces (issue 12 item 4).

kube-queue's and koord-queue's namespace controller tells each Namespace which queues
its jobs may use: ``<prefix>/available-queue`` (and ``…/available-queue-in-namespace``
when the Namespace already has that key) holds a compact JSON map of queue name to the
sorted quotas of the namespace that may use it, ``{"team-a":["team-a-q"]}``; when no
quota is available in the namespace the keys are removed. It reads the annotation back
(either key, the ``-in-namespace`` one first) and writes only when it differs.

Here the same: the quotas of a namespace are those that claim it (``Quota.namespaces``,
which the import fills from the ElasticQuota's namespace, its ``namespaces`` annotation
and the Namespace's ``available-quota`` list), and the queues each may use are its
tenant's. Written after each sync at most once per ``KQ_QUOTA_WRITEBACK_S``, on the
managed namespaces only, under both prefixes' ``available-queue`` key.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections import defaultdict
from typing import Any

from django.conf import settings

from queueing import compat
from queueing.models import Queue, Quota

log = logging.getLogger(__name__)

NAMESPACES = ("", "v1", "namespaces")
#: Every key of the family, under both prefixes.
FAMILY = tuple(p + k for k in compat.NAMESPACE_QUEUES_KEYS for p in compat.ANNOTATION_PREFIXES)
#: Written always (kube-queue writes its ``available-queue``; koord-queue its own).
WRITTEN = tuple(p + compat.NAMESPACE_QUEUES_KEYS[1] for p in compat.ANNOTATION_PREFIXES)
# Per cluster adapter of this process: the monotonic time of its last pass.
_last: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def available_queues() -> dict[str, dict[str, list[str]]]:
    """Per namespace claimed by a quota: queue name -> the namespace's quotas that may use it."""
    quotas_of: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for name, tenant_id, namespaces in Quota.objects.filter(tenant__isnull=False).values_list(
        "name", "tenant_id", "namespaces"
    ):
        for namespace in namespaces or ():
            quotas_of[str(namespace)].append((name, tenant_id))
    queues_of: dict[int, list[str]] = defaultdict(list)
    for name, tenant_id in Queue.objects.values_list("name", "tenant_id"):
        queues_of[tenant_id].append(name)
    out: dict[str, dict[str, list[str]]] = {}
    for namespace, quotas in quotas_of.items():
        by_queue: dict[str, list[str]] = defaultdict(list)
        for quota, tenant_id in quotas:
            for queue in queues_of.get(tenant_id, ()):
                by_queue[queue].append(quota)
        out[namespace] = {queue: sorted(names) for queue, names in by_queue.items()}
    return out


def encode(queues: dict[str, list[str]]) -> str:
    """As Go's json.Marshal writes a map: keys sorted, no spaces; empty when nothing."""
    return json.dumps(queues, sort_keys=True, separators=(",", ":")) if queues else ""


def changes_for(annotations: dict[str, str], wanted: str) -> dict[str, str | None]:
    """The annotation patch that makes a Namespace say ``wanted`` (None removes a key)."""
    current = compat.first_annotation(annotations, compat.NAMESPACE_QUEUES_KEYS) or ""
    if current == wanted and all(annotations.get(k, wanted) == wanted for k in FAMILY):
        return {}
    if not wanted:
        return {key: None for key in FAMILY if key in annotations}
    keys = set(WRITTEN) | {key for key in FAMILY if key in annotations}
    return {key: wanted for key in sorted(keys)}


def publish(cluster: Any, clock: Any = time.monotonic) -> int:
    """Write the Namespaces whose annotation differs; returns how many were written."""
    if not (hasattr(cluster, "list_objects") and hasattr(cluster, "patch_annotations")):
        return 0
    now = clock()
    interval = float(getattr(settings, "KQ_QUOTA_WRITEBACK_S", 10.0))
    last = _last.get(cluster)
    if last is not None and 0 <= now - last < interval:  # a clock set back starts afresh
        return 0
    _last[cluster] = now
    try:
        return _publish(cluster)
    except Exception:  # never the reason a sync fails; the next pass tries again
        log.exception("could not write the available queues of the namespaces")
        return 0


def _publish(cluster: Any) -> int:
    managed = set(getattr(cluster, "namespaces", None) or ())
    wanted = available_queues()
    written = 0
    for ns in cluster.list_objects(*NAMESPACES, cluster_scoped=True):
        meta = ns.get("metadata") or {}
        name = str(meta.get("name") or "")
        if managed and name not in managed:
            continue  # not ours to annotate
        patch = changes_for(dict(meta.get("annotations") or {}), encode(wanted.get(name, {})))
        if patch:
            cluster.patch_annotations(NAMESPACES, "", name, patch)
            written += 1
    return written

"""Runtime quota written back to the ElasticQuotas it comes from (issue 12 item 3), so
Koordinator's scheduler and this product read the same tree.

After each sync, every quota mirroring an ElasticQuota (``kube_ref``), and every quota
managed here whose ElasticQuota the queue writes (``kubequotas``), whose numbers changed
gets Koordinator's annotations, in its JSON resource-list format
(``{"cpu":"40m","memory":"40Mi"}``):

- ``quota.scheduling.koordinator.sh/runtime``: the runtime quota the last cycle computed;
- ``quota.scheduling.koordinator.sh/request``: what its waiting and admitted workloads ask
  (its subtree's, for a parent), capped at its max: what it could use.

Rate-limited: a quota is written only when a value changed, and at most once per
``KQ_QUOTA_WRITEBACK_S`` (default 10 s); what is skipped is written at a later sync,
since the comparison is against what was last written (kept in the shared cache).
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from typing import Any, Protocol, runtime_checkable

from django.conf import settings
from django.core.cache import cache

from queueing import faults, kubeobjects, kubequotas
from queueing.choices import ACTIVE_PHASES
from queueing.models import Quota, Workload
from queueing.quantities import format_resources

log = logging.getLogger(__name__)

RUNTIME_ANNOTATION = kubeobjects.RUNTIME_ANNOTATION
REQUEST_ANNOTATION = kubeobjects.REQUEST_ANNOTATION
ELASTIC_QUOTAS = kubeobjects.ELASTIC_QUOTAS
_written_at: dict[int, float] = {}  # quota id -> monotonic time of its last write here


@runtime_checkable
class AnnotationWriter(Protocol):
    def patch_annotations(
        self, resource: tuple[str, str, str], namespace: str, name: str, values: dict[str, str]
    ) -> None: ...


def _requests() -> dict[int, dict[str, int]]:
    """Per quota: the requests of its active workloads, its subtree's included."""
    own: dict[int, dict[str, int]] = defaultdict(dict)
    for quota_id, total in Workload.objects.filter(phase__in=ACTIVE_PHASES).values_list(
        "quota_id", "total_request"
    ):
        bucket = own[quota_id]
        for resource, amount in (total or {}).items():
            bucket[resource] = bucket.get(resource, 0) + int(amount)
    parents = dict(Quota.objects.values_list("id", "parent_id"))
    out: dict[int, dict[str, int]] = defaultdict(dict)
    for quota_id, amounts in own.items():
        node: int | None = quota_id
        while node is not None:  # every ancestor carries its descendants' demand
            bucket = out[node]
            for resource, amount in amounts.items():
                bucket[resource] = bucket.get(resource, 0) + amount
            node = parents.get(node)
    return out


def annotations_for(quota: Quota, requests: dict[str, int]) -> dict[str, str]:
    capped = {
        r: min(amount, int(quota.max[r])) if r in (quota.max or {}) else amount
        for r, amount in requests.items()
    }
    return {
        RUNTIME_ANNOTATION: json.dumps(format_resources(quota.runtime or {}), sort_keys=True),
        REQUEST_ANNOTATION: json.dumps(format_resources(capped), sort_keys=True),
    }


def publish(cluster: Any, clock: Any = time.monotonic) -> int:
    """Write what changed; returns ElasticQuotas written."""
    if not isinstance(cluster, AnnotationWriter):
        return 0
    try:
        return _publish(cluster, clock())
    except Exception:  # never the reason a sync fails; the next one tries again
        log.exception("could not write runtime quota back to the ElasticQuotas")
        return 0


def _targets() -> list[tuple[Quota, str, str]]:
    """Mirrored ElasticQuotas, and the ones the queue writes for quotas managed here."""
    return [
        (q, *q.kube_ref.removeprefix("ElasticQuota ").partition("/")[::2])
        for q in Quota.objects.filter(kube_ref__startswith="ElasticQuota ")
    ] + [(q, kubequotas.namespace(), q.name) for q in kubequotas.written()]


def _key(quota: Quota, namespace: str, name: str) -> str:
    return f"kq:eq-writeback:{quota.pk}:{namespace}/{name}"


def forget() -> None:
    """Forget what was written, so the next sync writes every ElasticQuota again (a
    cluster whose objects were replaced, e.g. restored from a backup; tests)."""
    _written_at.clear()
    for target in _targets():
        cache.delete(_key(*target))


def _publish(cluster: AnnotationWriter, now: float) -> int:
    targets = _targets()
    if not targets:
        return 0
    interval = float(getattr(settings, "KQ_QUOTA_WRITEBACK_S", 10.0))
    requests = _requests()
    written = 0
    for quota, namespace, name in targets:
        values = annotations_for(quota, requests.get(quota.pk, {}))
        key = _key(quota, namespace, name)
        if cache.get(key) == values:
            continue
        if now - _written_at.get(quota.pk, -interval) < interval:
            continue  # changed, but written a moment ago: at a later sync
        cluster.patch_annotations(ELASTIC_QUOTAS, namespace, name, values)
        faults.reach("quotawriteback.patched")
        cache.set(key, values, None)
        _written_at[quota.pk] = now
        written += 1
    return written

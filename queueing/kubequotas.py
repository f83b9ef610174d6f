"""Quotas managed here, written as ElasticQuotas (issue 12 item 2), so that Koordinator's
scheduler enforces the tree this product edits.

With ``KQ_KUBE_WRITE_QUOTAS`` (on with ``KQ_KUBE_LIVE_CONFIG``), after each sync every
quota that is *managed here* (no ``kube_ref``) and is not a root becomes one ElasticQuota
(``scheduling.sigs.k8s.io/v1alpha1``) in ``KQ_KUBE_QUOTA_NAMESPACE``, named like the
quota, labelled and annotated as Koordinator reads them:

- label ``quota.scheduling.koordinator.sh/parent``: the parent quota's name, or
  Koordinator's ``koordinator-root-quota`` for a quota right under a root of ours;
- labels ``…/is-parent`` (it has children here), ``…/allow-lent-resource``;
- label ``…/tree-id``: under a root imported from an is-root ElasticQuota, that root's
  tree-id (the default tree has none);
- annotations ``…/namespaces`` (the namespaces it claims, JSON) and ``…/shared-weight``;
- ``spec.min`` / ``spec.max`` as quantities;
- label ``app.kubernetes.io/managed-by: koord-queue``: ours. The import and the config
  watch skip such objects, so writing them never reads back as configuration.

A quota edited, renamed or deleted here has its object patched, replaced or deleted. A
name already taken by an ElasticQuota that is not ours is left alone (logged): that one
is Kubernetes' (the import mirrors it). Rate-limited: compared with the cluster when what
should be there changed, and at least every ``FULL_CHECK_S`` (someone may have deleted
ours). Runtime and request annotations are the write-back's (``quotawriteback``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Protocol, runtime_checkable

from django.conf import settings
from django.core.cache import cache

from queueing import compat, kubeobjects
from queueing.models import Quota
from queueing.quantities import QuantityError, format_resources, parse_resources

log = logging.getLogger(__name__)

FULL_CHECK_S = 60.0
KOORDINATOR_ROOT = "koordinator-root-quota"
DIGEST_KEY = "kq:kube-quotas:digest"
_last: dict[str, float] = {}

# The labels and annotations these objects carry that the queue decides (others are left).
LABELS = (
    compat.QUOTA_PARENT_LABEL,
    compat.QUOTA_IS_PARENT_LABEL,
    compat.QUOTA_ALLOW_LENT_LABEL,
    compat.QUOTA_TREE_ID_LABEL,
    kubeobjects.OWNER_LABEL,
)
ANNOTATIONS = (compat.QUOTA_NAMESPACES_ANNOTATION, compat.QUOTA_SHARED_WEIGHT_ANNOTATION)

Obj = dict[str, Any]


@runtime_checkable
class QuotaObjects(Protocol):
    def list_all(self) -> list[Obj]: ...
    def create(self, obj: Obj) -> None: ...
    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...
    def delete(self, namespace: str, name: str) -> None: ...


def enabled() -> bool:
    return bool(getattr(settings, "KQ_KUBE_WRITE_QUOTAS", False))


def namespace() -> str:
    return str(getattr(settings, "KQ_KUBE_QUOTA_NAMESPACE", "") or "koord-queue")


def written() -> list[Quota]:
    """The quotas that have an ElasticQuota of ours (when writing is on)."""
    if not enabled():
        return []
    return list(Quota.objects.filter(kube_ref="", parent__isnull=False))


def desired(tree_ids: dict[str, str]) -> dict[str, Obj]:
    """Quota name -> the ElasticQuota it should be. ``tree_ids``: root quota name -> the
    tree-id of the is-root ElasticQuota it was imported from."""
    quotas = {q.pk: q for q in Quota.objects.all()}
    parents = {q.parent_id for q in quotas.values() if q.parent_id is not None}
    out: dict[str, Obj] = {}
    for quota in quotas.values():
        if quota.kube_ref or quota.parent_id is None:
            continue
        parent = quotas[quota.parent_id]
        root = parent
        while root.parent_id is not None:
            root = quotas[root.parent_id]
        labels = {
            kubeobjects.OWNER_LABEL: kubeobjects.OWNER,
            compat.QUOTA_PARENT_LABEL: parent.name
            if parent.parent_id or parent.kube_ref
            else KOORDINATOR_ROOT,
            compat.QUOTA_IS_PARENT_LABEL: "true" if quota.pk in parents else "false",
            compat.QUOTA_ALLOW_LENT_LABEL: "true" if quota.allow_lent else "false",
        }
        if tree_ids.get(root.name):
            labels[compat.QUOTA_TREE_ID_LABEL] = tree_ids[root.name]
        annotations = {}
        if quota.namespaces:
            annotations[compat.QUOTA_NAMESPACES_ANNOTATION] = json.dumps(list(quota.namespaces))
        if quota.shared_weight:
            annotations[compat.QUOTA_SHARED_WEIGHT_ANNOTATION] = json.dumps(
                format_resources(quota.shared_weight), sort_keys=True
            )
        out[quota.name] = {
            "metadata": {
                "name": quota.name,
                "namespace": namespace(),
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {"min": format_resources(quota.min), "max": format_resources(quota.max)},
        }
    return out


def _amounts(values: Any) -> dict[str, int]:
    try:
        return parse_resources(values or {})
    except QuantityError:
        return {"<unreadable>": -1}


def patch_for(have: Obj, want: Obj) -> dict[str, Any] | None:
    """The merge patch that makes ``have`` say what ``want`` says (None: it does). Keys
    the queue decides and no longer wants are removed (null); others are left."""
    hm, wm = have.get("metadata") or {}, want["metadata"]
    patch: dict[str, Any] = {}
    for field, keys in (("labels", LABELS), ("annotations", ANNOTATIONS)):
        held, wanted = hm.get(field) or {}, wm.get(field) or {}
        delta = {k: wanted.get(k) for k in keys if held.get(k) != wanted.get(k)}
        if delta:
            patch.setdefault("metadata", {})[field] = delta
    spec = have.get("spec") or {}
    for key in ("min", "max"):
        held, wanted = spec.get(key) or {}, want["spec"][key]
        if _amounts(held) != _amounts(wanted):
            patch.setdefault("spec", {})[key] = {
                **{r: None for r in held if r not in wanted},
                **wanted,
            }
    return patch or None


def publish(cluster: Any, clock: Any = time.monotonic) -> int:
    """Create, patch and delete ours to match the quotas managed here; returns writes."""
    objects = getattr(cluster, "quota_objects", None)
    if not enabled() or not isinstance(objects, QuotaObjects):
        return 0
    try:
        return _publish(objects, clock())
    except Exception:  # never the reason a sync fails; the next one tries again
        log.exception("could not write the quotas managed here as ElasticQuotas")
        return 0


def _publish(objects: QuotaObjects, now: float) -> int:
    imported_roots = {
        q.kube_ref: q.name for q in Quota.objects.filter(parent__isnull=True).exclude(kube_ref="")
    }
    first = desired({})
    mark = hashlib.sha256(json.dumps(first, sort_keys=True).encode()).hexdigest()
    if cache.get(DIGEST_KEY) == mark and now - _last.get("full", float("-inf")) < FULL_CHECK_S:
        return 0
    existing = objects.list_all()
    tree_ids: dict[str, str] = {}
    for obj in existing:
        meta = obj.get("metadata") or {}
        root = imported_roots.get(f"ElasticQuota {meta.get('namespace') or ''}/{meta.get('name')}")
        tree_id = (meta.get("labels") or {}).get(compat.QUOTA_TREE_ID_LABEL)
        if root and tree_id:
            tree_ids[root] = str(tree_id)
    want = desired(tree_ids) if tree_ids else first
    ours = {str(o["metadata"]["name"]): o for o in existing if kubeobjects.is_ours(o)}
    theirs = {str(o["metadata"]["name"]) for o in existing if not kubeobjects.is_ours(o)}
    writes = 0
    for name, obj in sorted(want.items()):
        if name in theirs:
            log.warning(
                "quota %s is managed here, but an ElasticQuota of that name is not ours; "
                "left alone",
                name,
            )
            continue
        have = ours.get(name)
        if have is not None and have["metadata"].get("namespace") != obj["metadata"]["namespace"]:
            objects.delete(
                str(have["metadata"]["namespace"]), name
            )  # KQ_KUBE_QUOTA_NAMESPACE moved
            writes += 1
            have = None
        if have is None:
            objects.create(obj)
            writes += 1
            continue
        patch = patch_for(have, obj)
        if patch is not None:
            objects.patch(obj["metadata"]["namespace"], name, patch)
            writes += 1
    for name, have in sorted(ours.items()):
        if name not in want:  # deleted here, renamed, or now managed in Kubernetes
            objects.delete(str(have["metadata"].get("namespace") or ""), name)
            writes += 1
    cache.set(DIGEST_KEY, mark, None)
    _last["full"] = now
    if writes:
        log.info("wrote %d ElasticQuota change(s) for the quotas managed here", writes)
    return writes

"""Import kube-queue / koord-queue objects into tenants, quotas and queues.

What is read (docs/kube-queue-compat.md has the full mapping):

- ``ElasticQuota`` (scheduling.sigs.k8s.io/v1alpha1): one quota each, ``spec.min`` and
  ``spec.max`` as quantities, the parent from the label
  ``quota.scheduling.koordinator.sh/parent`` (none, ``root`` or Koordinator's root quota:
  directly under our root), ``shared-weight`` and ``namespaces`` annotations, the
  ``allow-lent-resource`` label. Each quota directly under the root becomes a tenant that
  owns its subtree. A leaf claims the namespaces its annotation lists, or else the
  namespace of its own name when one exists (Koordinator's convention).
- ``Queue`` (scheduling.x-k8s.io/v1alpha1): one queue each, owned by the tenant of the
  quota that claims the Queue's namespace; ``queuePolicy`` (FIFO means Block) and
  ``priority``. The first Queue of a namespace becomes its quota's default queue.
- ``QueueUnit``: not imported (they are runtime state); counted and checked, and with
  ``KQ_MIRROR_QUEUEUNITS`` the sync reads their queue and priority for their jobs.

Every write goes through ``queueing.actions`` inside one transaction; each item in a
savepoint, so one refused item is reported and the rest go on. A dry run does all of it,
with every validation, and rolls back. Running twice changes nothing the second time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from queueing import actions, compat
from queueing.actions import Actor
from queueing.choices import normalize_policy
from queueing.cluster.base import NodeInfo
from queueing.models import Queue, Quota, Tenant
from queueing.quantities import QuantityError, describe, format_resources, parse_resources

Obj = dict[str, Any]


@dataclass
class KubeQueueObjects:
    """What the import reads from a cluster."""

    elastic_quotas: list[Obj] = field(default_factory=list)
    queues: list[Obj] = field(default_factory=list)
    queue_units: list[Obj] = field(default_factory=list)
    namespaces: set[str] = field(default_factory=set)
    capacity: dict[str, int] = field(default_factory=dict)  # allocatable of all nodes


def read_objects(cluster: Any) -> KubeQueueObjects:
    """List the kube-queue and Koordinator objects through a cluster adapter that has
    ``list_objects`` and ``nodes`` (the Kubernetes adapter)."""
    group, version = compat.KUBE_QUEUE_GROUP, compat.KUBE_QUEUE_VERSION
    capacity: dict[str, int] = {}
    node: NodeInfo
    for node in cluster.nodes():
        for resource, amount in node.allocatable.items():
            capacity[resource] = capacity.get(resource, 0) + int(amount)
    return KubeQueueObjects(
        elastic_quotas=cluster.list_objects(
            compat.ELASTIC_QUOTA_GROUP, compat.ELASTIC_QUOTA_VERSION, "elasticquotas"
        ),
        queues=cluster.list_objects(group, version, "queues"),
        queue_units=cluster.list_objects(group, version, "queueunits"),
        namespaces={
            str((ns.get("metadata") or {}).get("name"))
            for ns in cluster.list_objects("", "v1", "namespaces", cluster_scoped=True)
        },
        capacity=capacity,
    )


@dataclass
class Item:
    """One line of the plan: what happens (or happened) to one object."""

    verb: str  # create, update, unchanged, skip, error
    what: str
    detail: str = ""

    MARKS = {"create": "+", "update": "~", "unchanged": "=", "skip": "-", "error": "!"}

    def line(self) -> str:
        return f"{self.MARKS.get(self.verb, '?')} {self.verb} {self.what}" + (
            f": {self.detail}" if self.detail else ""
        )


@dataclass
class ImportReport:
    items: list[Item] = field(default_factory=list)
    dry_run: bool = False

    def add(self, verb: str, what: str, detail: str = "") -> None:
        self.items.append(Item(verb, what, detail))

    def counts(self) -> Counter[str]:
        return Counter(item.verb for item in self.items)

    @property
    def changes(self) -> int:
        counts = self.counts()
        return counts["create"] + counts["update"]

    def lines(self) -> list[str]:
        counts = self.counts()
        summary = ", ".join(
            f"{counts[v]} {v}" for v in ("create", "update", "unchanged", "skip", "error")
        )
        head = "Dry run: the plan below was checked and rolled back; nothing was written."
        return ([head] if self.dry_run else []) + [i.line() for i in self.items] + [summary]


class _Rollback(Exception):
    pass


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _json_annotation(obj: Obj, key: str) -> Any:
    raw = (_meta(obj).get("annotations") or {}).get(key)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise QuantityError(f"annotation {key} is not JSON: {raw!r}") from exc


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "message_dict"):
            return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return " ".join(exc.messages)
    return str(exc)


@dataclass
class _QuotaPlan:
    name: str
    parent: str | None  # None: directly under the root
    min: dict[str, int]
    max: dict[str, int]
    shared_weight: dict[str, int]
    allow_lent: bool
    namespaces: list[str]
    tenant: str = ""


def _plan_quotas(objects: KubeQueueObjects, report: ImportReport) -> list[_QuotaPlan]:
    """Parse ElasticQuotas, parents before children; bad ones are reported and left out."""
    parsed: dict[str, _QuotaPlan] = {}
    for obj in sorted(objects.elastic_quotas, key=lambda o: str(_meta(o).get("name"))):
        meta = _meta(obj)
        name = str(meta.get("name"))
        labels = meta.get("labels") or {}
        if name in compat.KOORDINATOR_ROOT_QUOTAS or name in compat.KOORDINATOR_SYSTEM_QUOTAS:
            report.add("skip", f"quota {name}", "Koordinator's own quota")
            continue
        if name in parsed:
            report.add("error", f"quota {name}", "two ElasticQuotas have this name")
            continue
        parent = labels.get(compat.QUOTA_PARENT_LABEL) or None
        if parent in compat.KOORDINATOR_ROOT_QUOTAS:
            parent = None
        try:
            spec = obj.get("spec") or {}
            weights = _json_annotation(obj, compat.QUOTA_SHARED_WEIGHT_ANNOTATION) or {}
            listed = _json_annotation(obj, compat.QUOTA_NAMESPACES_ANNOTATION) or []
            plan = _QuotaPlan(
                name=name,
                parent=parent,
                min=parse_resources(spec.get("min")),
                max=parse_resources(spec.get("max")),
                shared_weight=parse_resources(weights),
                allow_lent=str(labels.get(compat.QUOTA_ALLOW_LENT_LABEL, "true")).lower()
                != "false",
                namespaces=[str(n) for n in listed] if isinstance(listed, list) else [],
            )
        except QuantityError as exc:
            report.add("error", f"quota {name}", str(exc))
            continue
        parsed[name] = plan
    parents = {p.parent for p in parsed.values() if p.parent}
    ordered: list[_QuotaPlan] = []
    placed: set[str] = set()

    def visit(plan: _QuotaPlan, chain: tuple[str, ...]) -> bool:
        if plan.name in placed:
            return True
        if plan.name in chain:
            report.add("error", f"quota {plan.name}", "its parents form a cycle")
            return False
        if plan.parent is not None:
            parent = parsed.get(plan.parent)
            if parent is not None:
                if not visit(parent, (*chain, plan.name)):
                    return False
                plan.tenant = parent.tenant
            else:  # a parent that is already a quota here
                known = Quota.objects.select_related("tenant").filter(name=plan.parent).first()
                if known is None or known.tenant is None:
                    report.add(
                        "error",
                        f"quota {plan.name}",
                        f"parent {plan.parent!r} is not a tenant quota",
                    )
                    return False
                plan.tenant = known.tenant.name
        else:
            plan.tenant = plan.name
        if plan.name not in parents and not plan.namespaces and plan.name in objects.namespaces:
            plan.namespaces = [plan.name]  # a leaf claims the namespace of its name
        placed.add(plan.name)
        ordered.append(plan)
        return True

    for plan in list(parsed.values()):
        visit(plan, ())
    return ordered


def _root(root_name: str | None) -> str:
    """The root to import under: the named one, the only one, or a new one sized to the
    cluster (and at least what the top-level quotas ask for)."""
    roots = list(Quota.objects.filter(parent__isnull=True).values_list("name", flat=True))
    if root_name:
        if root_name in roots or not Quota.objects.filter(name=root_name).exists():
            return root_name
        raise ValueError(f"quota {root_name!r} exists but is not a root")
    if len(roots) == 1:
        return roots[0]
    if len(roots) > 1:
        raise ValueError(f"there are several roots ({', '.join(roots)}); choose one with --root")
    return "root"


def _root_size(objects: KubeQueueObjects, plans: Sequence[_QuotaPlan]) -> dict[str, int]:
    size = dict(objects.capacity)
    top = [p for p in plans if p.parent is None]
    for resource in {r for p in top for r in (*p.min, *p.max)}:
        size[resource] = max(
            size.get(resource, 0),
            sum(p.min.get(resource, 0) for p in top),
            max(p.max.get(resource, 0) for p in top),
        )
    return size


def import_kube_queue(
    objects: KubeQueueObjects,
    *,
    dry_run: bool = False,
    root_name: str | None = None,
    actor: Actor | None = None,
) -> ImportReport:
    """Create or update tenants, quotas and queues from kube-queue objects."""
    actor = actor or Actor.system()
    report = ImportReport(dry_run=dry_run)
    try:
        with transaction.atomic():
            _apply(objects, report, root_name, actor)
            if dry_run:
                raise _Rollback
    except _Rollback:
        pass
    return report


def _step(report: ImportReport, what: str, work: Callable[[], tuple[str, str] | None]) -> bool:
    """Run one item in a savepoint; record what it did or why it was refused."""
    try:
        with transaction.atomic():
            outcome = work()
    except (ValidationError, actions.ActionError, actions.ConflictError, ValueError) as exc:
        report.add("error", what, _first_error(exc))
        return False
    if outcome is not None:
        report.add(outcome[0], what, outcome[1])
    return True


def _apply(
    objects: KubeQueueObjects, report: ImportReport, root_name: str | None, actor: Actor
) -> None:
    plans = _plan_quotas(objects, report)
    try:
        root = _root(root_name)
    except ValueError as exc:
        report.add("error", "root", str(exc))
        return

    if plans and not Quota.objects.filter(name=root).exists():
        size = _root_size(objects, plans)

        def make_root() -> tuple[str, str]:
            quantities = format_resources(size)  # actions parse quantities, not amounts
            actions.create_quota(
                actor, name=root, tenant=None, parent=None, min=quantities, max=quantities
            )
            return "create", f"the cluster's capacity, {describe(size)}"

        if not _step(report, f"quota {root} (root)", make_root):
            return
    elif plans:
        report.add("unchanged", f"quota {root} (root)", "kept as it is")

    failed: set[str] = set()
    for plan in plans:
        if plan.parent in failed:
            report.add("skip", f"quota {plan.name}", f"its parent {plan.parent} was not imported")
            failed.add(plan.name)
            continue
        if not _step(report, f"quota {plan.name}", _bind(_upsert_quota, plan, root, actor)):
            failed.add(plan.name)

    defaults: set[str] = set()
    for obj in sorted(
        objects.queues, key=lambda o: (str(_meta(o).get("namespace")), str(_meta(o).get("name")))
    ):
        name, namespace = str(_meta(obj).get("name")), str(_meta(obj).get("namespace") or "")
        first = namespace not in defaults
        defaults.add(namespace)
        _step(report, f"queue {name}", _bind(_upsert_queue, obj, first, actor))

    queue_names = set(Queue.objects.values_list("name", flat=True))
    missing = Counter(
        str((u.get("spec") or {}).get("queue"))
        for u in objects.queue_units
        if (u.get("spec") or {}).get("queue")
        and (u.get("spec") or {}).get("queue") not in queue_names
    )
    for queue, count in sorted(missing.items()):
        report.add("skip", f"{count} QueueUnit(s)", f"their queue {queue!r} does not exist")
    if objects.queue_units:
        report.add(
            "unchanged",
            f"{len(objects.queue_units)} QueueUnit(s)",
            "runtime objects, read by the sync (KQ_MIRROR_QUEUEUNITS) rather than imported",
        )


def _bind(work: Callable[..., tuple[str, str]], *args: Any) -> Callable[[], tuple[str, str]]:
    return lambda: work(*args)


def _diff(label: str, old: Mapping[str, int], new: Mapping[str, int]) -> str:
    return f"{label} {describe(old)} -> {describe(new)}"


def _upsert_quota(plan: _QuotaPlan, root: str, actor: Actor) -> tuple[str, str]:
    parent = Quota.objects.get(name=plan.parent or root)
    existing = Quota.objects.select_related("parent", "tenant").filter(name=plan.name).first()
    if existing is None:
        tenant = Tenant.objects.filter(name=plan.tenant).first()
        made_tenant = tenant is None
        if tenant is None:
            tenant = actions.create_tenant(actor, name=plan.tenant)
        actions.create_quota(
            actor,
            name=plan.name,
            tenant=tenant,
            parent=parent,
            min=format_resources(plan.min),
            max=format_resources(plan.max),
            shared_weight=format_resources(plan.shared_weight),
            allow_lent=plan.allow_lent,
            namespaces=plan.namespaces,
        )
        detail = (
            f"tenant {plan.tenant}{' (new)' if made_tenant else ''}, parent {parent.name}, "
            f"min {describe(plan.min)}, max {describe(plan.max)}"
        )
        if plan.namespaces:
            detail += f", namespaces {', '.join(plan.namespaces)}"
        return "create", detail
    if existing.tenant is None or existing.tenant.name != plan.tenant:
        raise ValueError(
            f"a quota of this name belongs to {existing.tenant or 'no tenant'}, not {plan.tenant}"
        )
    changes: dict[str, Any] = {}
    notes: list[str] = []
    if existing.parent_id != parent.pk:
        changes["parent"] = parent
        notes.append(f"parent {existing.parent} -> {parent.name}")
    for key in ("min", "max", "shared_weight"):
        new = getattr(plan, key)
        if dict(getattr(existing, key)) != new:
            changes[key] = format_resources(new)
            notes.append(_diff(key, getattr(existing, key), new))
    if existing.allow_lent != plan.allow_lent:
        changes["allow_lent"] = plan.allow_lent
        notes.append(f"allow_lent {existing.allow_lent} -> {plan.allow_lent}")
    if sorted(existing.namespaces or []) != sorted(plan.namespaces):
        changes["namespaces"] = plan.namespaces
        notes.append(f"namespaces {existing.namespaces} -> {plan.namespaces}")
    if not changes:
        return "unchanged", ""
    actions.update_quota(actor, existing, **changes)
    return "update", "; ".join(notes)


def _upsert_queue(obj: Obj, first_in_namespace: bool, actor: Actor) -> tuple[str, str]:
    meta, spec = _meta(obj), obj.get("spec") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "")
    quota = actions.quota_for_namespace(namespace) if namespace else None
    if quota is None or quota.tenant is None:
        raise ValueError(
            f"no tenant quota claims its namespace {namespace!r}; import or create one first"
        )
    wanted: dict[str, Any] = {
        "policy": normalize_policy(str(spec.get("queuePolicy") or "Priority")),
        "priority": int(spec.get("priority") or 0),
    }
    queue = Queue.objects.filter(name=name).first()
    notes: list[str] = []
    verb = "unchanged"
    if queue is None:
        queue = actions.create_queue(actor, tenant=quota.tenant, name=name, **wanted)
        verb = "create"
        notes.append(
            f"tenant {quota.tenant.name}, policy {wanted['policy']}, priority {wanted['priority']}"
        )
    elif queue.tenant_id != quota.tenant_id:
        raise ValueError(f"a queue of this name belongs to another tenant ({queue.tenant})")
    else:
        changes = {k: v for k, v in wanted.items() if getattr(queue, k) != v}
        if changes:
            queue = actions.update_queue(actor, queue, **changes)
            verb = "update"
            notes.extend(f"{k} -> {v}" for k, v in changes.items())
    if first_in_namespace and quota.default_queue_id != queue.pk:
        actions.update_quota(actor, quota, default_queue=queue)
        verb = "update" if verb == "unchanged" else verb
        notes.append(f"default queue of quota {quota.name} (namespace {namespace})")
    return verb, "; ".join(notes)

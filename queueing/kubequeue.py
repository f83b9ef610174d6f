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

from queueing import actions, compat, kubeobjects
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
    # kube-queue's ResourceQuota plugin: a namespace's core/v1 ResourceQuotas.
    resource_quotas: list[Obj] = field(default_factory=list)
    # Namespace -> its annotations (koord-queue's available-quota / available-queue).
    namespace_annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    # koord-queue's (and ACK's) ElasticQuotaTree: a whole tree in one object.
    elastic_quota_trees: list[Obj] = field(default_factory=list)


def read_objects(cluster: Any, *, queue_units: bool = True) -> KubeQueueObjects:
    """List the kube-queue and Koordinator objects through a cluster adapter that has
    ``list_objects`` and ``nodes`` (the Kubernetes adapter)."""
    group, version = compat.KUBE_QUEUE_GROUP, compat.KUBE_QUEUE_VERSION
    capacity: dict[str, int] = {}
    node: NodeInfo
    for node in cluster.nodes():
        for resource, amount in node.allocatable.items():
            capacity[resource] = capacity.get(resource, 0) + int(amount)
    namespaces = {
        str(_meta(ns).get("name")): dict(_meta(ns).get("annotations") or {})
        for ns in cluster.list_objects("", "v1", "namespaces", cluster_scoped=True)
    }
    return KubeQueueObjects(
        # The quota tree is one for the whole cluster: a parent's ElasticQuota usually
        # lives in a namespace with no jobs (koordinator-system, say), so all are read.
        elastic_quotas=cluster.list_objects(
            compat.ELASTIC_QUOTA_GROUP,
            compat.ELASTIC_QUOTA_VERSION,
            "elasticquotas",
            cluster_scoped=True,
        ),
        # koord-queue and kube-queue keep cluster-wide Queues in a namespace of their own,
        # which need not be a managed one: listed across all namespaces.
        queues=cluster.list_objects(group, version, "queues", cluster_scoped=True),
        queue_units=cluster.list_objects(group, version, "queueunits") if queue_units else [],
        namespaces=set(namespaces),
        capacity=capacity,
        resource_quotas=cluster.list_objects("", "v1", "resourcequotas"),
        namespace_annotations=namespaces,
        elastic_quota_trees=cluster.list_objects(
            *kubeobjects.ELASTIC_QUOTA_TREES, cluster_scoped=True
        ),
    )


def tree_nodes(trees: Sequence[Obj]) -> list[Obj]:
    """The nodes of ElasticQuotaTrees as ElasticQuota-shaped objects, so one parser reads
    both. ``spec.root`` is the cluster (our root); each node below it is a quota: its
    ``min``/``max``, its ``namespaces``, its parent the node above (none right under the
    root). Its ``_kube_ref`` names the tree and the node (``ElasticQuotaTree ns/tree#node``).
    """
    out: list[Obj] = []
    for tree in sorted(
        trees, key=lambda t: (str(_meta(t).get("namespace")), str(_meta(t).get("name")))
    ):
        meta = _meta(tree)
        where = f"{meta.get('namespace') or ''}/{meta.get('name')}"
        root = (tree.get("spec") or {}).get("root") or {}

        # Depth first, parents before children: (node, its parent's name or None).
        stack: list[tuple[Obj, str | None]] = [
            (c, None) for c in reversed(root.get("children") or [])
        ]
        while stack:
            child, parent = stack.pop()
            if not isinstance(child, dict) or not child.get("name"):
                continue
            name = str(child["name"])
            labels = {compat.QUOTA_IS_PARENT_LABEL: "true" if child.get("children") else "false"}
            if parent is not None:
                labels[compat.QUOTA_PARENT_LABEL] = parent
            annotations = {}
            if child.get("namespaces"):
                annotations[compat.QUOTA_NAMESPACES_ANNOTATION] = json.dumps(
                    [str(n) for n in child["namespaces"]]
                )
            out.append(
                {
                    "metadata": {
                        "name": name,
                        "namespace": "",
                        "labels": labels,
                        "annotations": annotations,
                    },
                    "spec": {"min": child.get("min") or {}, "max": child.get("max") or {}},
                    "_kube_ref": f"ElasticQuotaTree {where}#{name}",
                }
            )
            stack.extend((c, name) for c in reversed(child.get("children") or []))
    return out


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
    kube_ref: str = ""
    is_root: bool = False  # Koordinator's is-root: a tree of its own, no tenant
    is_parent: bool = False


# ResourceQuota ``hard`` names that are requests of a resource (kube-queue compares a
# QueueUnit's resources with them); limits.*, counts and storage are not queue quota.
def _hard_resource(name: str) -> str | None:
    if name.startswith("requests."):
        return name.removeprefix("requests.")
    if name in ("cpu", "memory") or ("/" in name and not name.startswith("count/")):
        return name
    return None


def _parse_elastic_quota(obj: Obj) -> _QuotaPlan:
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    name = str(meta.get("name"))
    parent = labels.get(compat.QUOTA_PARENT_LABEL) or None
    if parent in compat.KOORDINATOR_ROOT_QUOTAS:
        parent = None
    spec = obj.get("spec") or {}
    weights = _json_annotation(obj, compat.QUOTA_SHARED_WEIGHT_ANNOTATION) or {}
    listed = _json_annotation(obj, compat.QUOTA_NAMESPACES_ANNOTATION) or []
    is_root = str(labels.get(compat.QUOTA_IS_ROOT_LABEL, "")).lower() == "true"
    return _QuotaPlan(
        name=name,
        parent=None if is_root else parent,
        min=parse_resources(spec.get("min")),
        max=parse_resources(spec.get("max")),
        shared_weight=parse_resources(weights),
        allow_lent=str(labels.get(compat.QUOTA_ALLOW_LENT_LABEL, "true")).lower() != "false",
        namespaces=[str(n) for n in listed] if isinstance(listed, list) else [],
        kube_ref=str(obj.get("_kube_ref") or f"ElasticQuota {meta.get('namespace') or ''}/{name}"),
        is_root=is_root,
        is_parent=str(labels.get(compat.QUOTA_IS_PARENT_LABEL, "")).lower() == "true",
    )


def _plan_quotas(objects: KubeQueueObjects, report: ImportReport) -> list[_QuotaPlan]:
    """Parse ElasticQuotas, parents before children; bad ones are reported and left out."""
    parsed: dict[str, _QuotaPlan] = {}
    home: dict[str, str] = {}  # quota -> the namespace its ElasticQuota lives in
    # The queue's own ElasticQuotas (for quotas managed here) are not configuration.
    mine = [o for o in objects.elastic_quotas if not kubeobjects.is_ours(o)]
    for obj in sorted(
        [*mine, *tree_nodes(objects.elastic_quota_trees)], key=lambda o: str(_meta(o).get("name"))
    ):
        meta = _meta(obj)
        name = str(meta.get("name"))
        if name in compat.KOORDINATOR_ROOT_QUOTAS or name in compat.KOORDINATOR_SYSTEM_QUOTAS:
            report.add("skip", f"quota {name}", "Koordinator's own quota")
            continue
        if name in parsed:
            report.add("error", f"quota {name}", "two ElasticQuotas have this name")
            continue
        try:
            parsed[name] = _parse_elastic_quota(obj)
        except QuantityError as exc:
            report.add("error", f"quota {name}", str(exc))
            continue
        home[name] = str(meta.get("namespace") or "")
    parents = {p.parent for p in parsed.values() if p.parent} | {
        p.name for p in parsed.values() if p.is_parent or p.is_root
    }
    # Koordinator's rule: a quota without a namespaces annotation takes the pods of the
    # namespace its ElasticQuota lives in. A namespace holding several ElasticQuotas is a
    # place to keep them (koordinator-system, say), not a claim: there the quota takes the
    # namespace of its own name instead, when one exists.
    per_namespace = Counter(home.values())
    ordered: list[_QuotaPlan] = []
    placed: set[str] = set()

    def visit(plan: _QuotaPlan, chain: tuple[str, ...]) -> bool:
        if plan.name in placed:
            return True
        if plan.name in chain:
            report.add("error", f"quota {plan.name}", "its parents form a cycle")
            return False
        if plan.is_root:
            plan.tenant = ""
        elif plan.parent is not None:
            parent = parsed.get(plan.parent)
            if parent is not None:
                if not visit(parent, (*chain, plan.name)):
                    return False
                # Right under a tree's root, a quota is a tenant of its own.
                plan.tenant = plan.name if parent.is_root else parent.tenant
            else:  # a parent that is already a quota here
                known = Quota.objects.select_related("tenant").filter(name=plan.parent).first()
                if known is not None and known.parent_id is None:
                    plan.tenant = plan.name
                elif known is None or known.tenant is None:
                    report.add(
                        "error",
                        f"quota {plan.name}",
                        f"parent {plan.parent!r} is not a tenant quota",
                    )
                    return False
                else:
                    plan.tenant = known.tenant.name
        else:
            plan.tenant = plan.name
        if plan.name not in parents and not plan.namespaces:
            own = home.get(plan.name, "")
            if own and per_namespace[own] == 1:
                plan.namespaces = [own]
            elif plan.name in objects.namespaces:
                plan.namespaces = [plan.name]  # a leaf claims the namespace of its name
        placed.add(plan.name)
        ordered.append(plan)
        return True

    for plan in list(parsed.values()):
        visit(plan, ())
    _claim_listed_namespaces(objects, ordered, parents)
    return ordered


def _claim_listed_namespaces(
    objects: KubeQueueObjects, plans: Sequence[_QuotaPlan], parents: set[str]
) -> None:
    """koord-queue's ``available-quota-in-namespace`` on a Namespace: the first leaf it
    lists takes the namespace's jobs, unless a quota claims it already."""
    claimed = {ns for plan in plans for ns in plan.namespaces}
    leaves = {plan.name: plan for plan in plans if plan.name not in parents}
    for namespace, marks in sorted(objects.namespace_annotations.items()):
        if namespace in claimed:
            continue
        listed = compat.split_list(compat.first_annotation(marks, compat.NAMESPACE_QUOTAS_KEYS))
        for name in listed:
            plan = leaves.get(compat.quota_from_fullname(name))
            if plan is not None:
                plan.namespaces.append(namespace)
                claimed.add(namespace)
                break


def _plan_resource_quotas(
    objects: KubeQueueObjects, plans: Sequence[_QuotaPlan], report: ImportReport
) -> list[_QuotaPlan]:
    """kube-queue's ResourceQuota plugin: a namespace no ElasticQuota claims, whose quota is
    a core/v1 ResourceQuota, becomes a quota (and tenant) of the namespace's name whose min
    and max are its ``hard`` requests. Of several, the one named like the namespace
    counts (kube-queue's rule)."""
    claimed = {ns for plan in plans for ns in plan.namespaces}
    names = {plan.name for plan in plans}
    by_namespace: dict[str, list[Obj]] = {}
    for obj in objects.resource_quotas:
        by_namespace.setdefault(str(_meta(obj).get("namespace") or ""), []).append(obj)
    out: list[_QuotaPlan] = []
    for namespace, found in sorted(by_namespace.items()):
        if not namespace or namespace in claimed:
            continue
        known = actions.quota_for_namespace(namespace)
        if known is not None and known.kube_ref and not known.kube_ref.startswith("ResourceQuota "):
            continue  # an ElasticQuota imported earlier claims it
        chosen = found[0] if len(found) == 1 else None
        if chosen is None:
            chosen = next((o for o in found if _meta(o).get("name") == namespace), None)
        what = f"quota {namespace}"
        if chosen is None:
            report.add(
                "error",
                what,
                f"namespace {namespace} has {len(found)} ResourceQuotas and none is named "
                "like it (kube-queue would not know which one to use either)",
            )
            continue
        if namespace in names:
            report.add("error", what, "an ElasticQuota of this name is imported too")
            continue
        hard = (chosen.get("spec") or {}).get("hard") or {}
        amounts = {_hard_resource(str(k)): v for k, v in hard.items()}
        try:
            limits = parse_resources({k: v for k, v in amounts.items() if k})
        except QuantityError as exc:
            report.add("error", what, f"ResourceQuota {_meta(chosen).get('name')}: {exc}")
            continue
        out.append(
            _QuotaPlan(
                name=namespace,
                parent=None,
                min=dict(limits),
                max=dict(limits),
                shared_weight={},
                allow_lent=True,
                namespaces=[namespace],
                tenant=namespace,
                kube_ref=f"ResourceQuota {namespace}/{_meta(chosen).get('name')}",
            )
        )
    return out


def _root(root_name: str | None) -> str:
    """The root to import under: the named one, the only one, or a new one sized to the
    cluster (and at least what the top-level quotas ask for)."""
    # Roots imported from Koordinator's is-root quotas are trees of their own.
    roots = list(
        Quota.objects.filter(parent__isnull=True, kube_ref="").values_list("name", flat=True)
    )
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
    top = [p for p in plans if p.parent is None and not p.is_root]
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
    plans += _plan_resource_quotas(objects, plans, report)
    try:
        root = _root(root_name)
    except ValueError as exc:
        report.add("error", "root", str(exc))
        return

    under_root = [p for p in plans if p.parent is None and not p.is_root]
    if under_root and not Quota.objects.filter(name=root).exists():
        size = _root_size(objects, plans)

        def make_root() -> tuple[str, str]:
            quantities = format_resources(size)  # actions parse quantities, not amounts
            actions.create_quota(
                actor, name=root, tenant=None, parent=None, min=quantities, max=quantities
            )
            return "create", f"the cluster's capacity, {describe(size)}"

        if not _step(report, f"quota {root} (root)", make_root):
            return
    elif under_root:
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
    taken = _queue_names(objects.queues)
    for obj in sorted(
        objects.queues, key=lambda o: (str(_meta(o).get("namespace")), str(_meta(o).get("name")))
    ):
        name, namespace = str(_meta(obj).get("name")), str(_meta(obj).get("namespace") or "")
        first = namespace not in defaults and namespace not in compat.QUEUE_HOME_NAMESPACES
        defaults.add(namespace)
        what = f"queue {taken[(namespace, name)]}"
        _step(report, what, _bind(_upsert_queue, obj, taken[(namespace, name)], first, actor))

    missing = Counter(
        str((u.get("spec") or {}).get("queue"))
        for u in objects.queue_units
        if (u.get("spec") or {}).get("queue")
        and find_queue(
            str(u["spec"]["queue"]),
            str((u.get("metadata") or {}).get("namespace") or ""),
        )
        is None
        and u["spec"]["queue"] != compat.KUBE_QUEUE_DEFAULT_QUEUE
    )
    for queue, count in sorted(missing.items()):
        report.add("skip", f"{count} QueueUnit(s)", f"their queue {queue!r} does not exist")
    if objects.queue_units:
        report.add(
            "unchanged",
            f"{len(objects.queue_units)} QueueUnit(s)",
            "runtime objects, read by the sync (KQ_MIRROR_QUEUEUNITS) rather than imported",
        )


def _bind(
    work: Callable[..., tuple[str, str] | None], *args: Any
) -> Callable[[], tuple[str, str] | None]:
    return lambda: work(*args)


def _diff(label: str, old: Mapping[str, int], new: Mapping[str, int]) -> str:
    return f"{label} {describe(old)} -> {describe(new)}"


def _upsert_quota(plan: _QuotaPlan, root: str, actor: Actor) -> tuple[str, str]:
    parent = None if plan.is_root else Quota.objects.get(name=plan.parent or root)
    existing = Quota.objects.select_related("parent", "tenant").filter(name=plan.name).first()
    if existing is None:
        tenant = Tenant.objects.filter(name=plan.tenant).first() if plan.tenant else None
        made_tenant = tenant is None and bool(plan.tenant)
        if tenant is None and plan.tenant:
            tenant = actions.create_tenant(actor, name=plan.tenant)
        quota = actions.create_quota(
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
        actions.set_kube_ref(actor, quota, plan.kube_ref)
        if plan.is_root:
            detail = f"a tree of its own (is-root), {describe(plan.max)}"
        else:
            assert parent is not None
            detail = (
                f"tenant {plan.tenant}{' (new)' if made_tenant else ''}, parent {parent.name}, "
                f"min {describe(plan.min)}, max {describe(plan.max)}"
            )
        if plan.namespaces:
            detail += f", namespaces {', '.join(plan.namespaces)}"
        if plan.kube_ref.startswith("ResourceQuota "):
            detail += f" (from {plan.kube_ref})"
        return "create", detail
    wanted_tenant = plan.tenant or None
    if (existing.tenant.name if existing.tenant else None) != wanted_tenant:
        raise ValueError(
            f"a quota of this name belongs to {existing.tenant or 'no tenant'}, "
            f"not {wanted_tenant or 'no tenant'}"
        )
    changes: dict[str, Any] = {}
    notes: list[str] = []
    if existing.parent_id != (parent.pk if parent else None):
        changes["parent"] = parent
        notes.append(f"parent {existing.parent} -> {parent.name if parent else 'none'}")
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
    if existing.kube_ref != plan.kube_ref:
        notes.append(f"managed in Kubernetes ({plan.kube_ref})")
    if not changes and existing.kube_ref == plan.kube_ref:
        return "unchanged", ""
    if changes:
        existing = actions.update_quota(actor, existing, **changes)
    actions.set_kube_ref(actor, existing, plan.kube_ref)
    return "update", "; ".join(notes)


def _queue_names(queues: Sequence[Obj]) -> dict[tuple[str, str], str]:
    """The name each Queue takes here. kube-queue's Queues are namespaced and ours are
    not: a Queue keeps its name unless a Queue of another namespace (listed now, or
    imported before) or another tenant's queue has it; then it is ``<namespace>-<name>``.
    A queue made here for the same tenant (a quota's default queue, say) is adopted."""
    by_name: dict[str, list[Obj]] = {}
    for obj in queues:
        by_name.setdefault(str(_meta(obj).get("name")), []).append(obj)
    out: dict[tuple[str, str], str] = {}
    for name, objs in by_name.items():
        holder = Queue.objects.filter(name=name).first()
        for obj in sorted(objs, key=lambda o: str(_meta(o).get("namespace") or "")):
            namespace = str(_meta(obj).get("namespace") or "")
            mine = f"Queue {namespace}/{name}"
            already = Queue.objects.filter(kube_ref=mine).values_list("name", flat=True).first()
            if already:
                out[(namespace, name)] = already
            elif len(objs) == 1 and (holder is None or _adoptable(holder, obj)):
                out[(namespace, name)] = name
            else:
                out[(namespace, name)] = f"{namespace}-{name}"[:63]
    return out


def _adoptable(queue: Queue, obj: Obj) -> bool:
    if queue.kube_ref:
        return False
    try:
        owner, _ = _queue_owner(obj)
    except ValueError:
        return False
    return owner is not None and owner.tenant_id == queue.tenant_id


def find_queue(name: str, namespace: str) -> Queue | None:
    """The queue a job of ``namespace`` means by ``name``: the Queue of its own namespace,
    then one of koord-queue's or kube-queue's cluster-wide Queues, then a queue made here.
    kube-queue's implicit ``default`` queue, when no Queue has that name in the namespace,
    is the quota's default queue (None)."""
    refs = [f"Queue {namespace}/{name}"] + [
        f"Queue {home}/{name}" for home in compat.QUEUE_HOME_NAMESPACES
    ]
    for ref in refs:
        queue = Queue.objects.filter(kube_ref=ref).first()
        if queue is not None:
            return queue
    if name == compat.KUBE_QUEUE_DEFAULT_QUEUE:
        return None
    return Queue.objects.filter(name=name).first()


def _queue_owner(obj: Obj) -> tuple[Quota | None, str]:
    """The quota whose tenant owns a Queue, and how that was found."""
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "")
    annotations = meta.get("annotations") or {}
    fullname = compat.annotation(annotations, compat.QUOTA_FULLNAME_KEY)
    if fullname:
        quota = Quota.objects.filter(name=compat.quota_from_fullname(fullname)).first()
        if quota is None:
            raise ValueError(f"its quota-fullname {fullname!r} names no quota")
        return quota, f"created for quota {quota.name}"
    listed = compat.split_list(compat.first_annotation(annotations, compat.QUEUE_QUOTAS_KEYS))
    if listed and "*" not in listed:
        quotas = list(
            Quota.objects.select_related("tenant").filter(
                name__in=[compat.quota_from_fullname(n) for n in listed]
            )
        )
        tenants = {q.tenant_id for q in quotas if q.tenant_id is not None}
        if len(tenants) == 1:
            return quotas[0], f"open to quota(s) {', '.join(sorted(q.name for q in quotas))}"
        if len(tenants) > 1:
            raise ValueError("its available-quota list spans several tenants; a queue here has one")
    if namespace and namespace not in compat.QUEUE_HOME_NAMESPACES:
        quota = actions.quota_for_namespace(namespace)
        if quota is not None:
            return quota, ""
    where = (
        f"no tenant quota claims its namespace {namespace!r}"
        if namespace not in compat.QUEUE_HOME_NAMESPACES
        else f"it is in {namespace!r}"
    )
    raise ValueError(
        f"{where}, and no quota-fullname or available-quota annotation names its quota; "
        "import or create one first"
    )


def _upsert_queue(obj: Obj, name: str, first_in_namespace: bool, actor: Actor) -> tuple[str, str]:
    meta, spec = _meta(obj), obj.get("spec") or {}
    namespace = str(meta.get("namespace") or "")
    quota, how = _queue_owner(obj)
    if quota is None or quota.tenant is None:
        raise ValueError(f"the quota of namespace {namespace!r} belongs to no tenant")
    wanted: dict[str, Any] = {
        "policy": normalize_policy(str(spec.get("queuePolicy") or "Priority")),
        "priority": int(spec.get("priority") or 0),
    }
    kube_ref = f"Queue {namespace}/{meta.get('name')}"
    queue = Queue.objects.filter(name=name).first()
    notes: list[str] = []
    verb = "unchanged"
    if queue is None:
        queue = actions.create_queue(actor, tenant=quota.tenant, name=name, **wanted)
        verb = "create"
        notes.append(
            f"tenant {quota.tenant.name}, policy {wanted['policy']}, priority {wanted['priority']}"
        )
        if name != meta.get("name"):
            notes.append(f"Queue {meta.get('name')} of namespace {namespace}")
        if how:
            notes.append(how)
    elif queue.tenant_id != quota.tenant_id:
        raise ValueError(f"a queue of this name belongs to another tenant ({queue.tenant})")
    else:
        changes = {k: v for k, v in wanted.items() if getattr(queue, k) != v}
        if changes:
            queue = actions.update_queue(actor, queue, **changes)
            verb = "update"
            notes.extend(f"{k} -> {v}" for k, v in changes.items())
    if queue.kube_ref != kube_ref:
        actions.set_kube_ref(actor, queue, kube_ref)
        if verb == "unchanged":
            verb = "update"
            notes.append(f"managed in Kubernetes ({kube_ref})")
    made_for = bool(compat.annotation(meta.get("annotations") or {}, compat.QUOTA_FULLNAME_KEY))
    if (first_in_namespace or made_for) and quota.default_queue_id != queue.pk:
        actions.update_quota(actor, quota, default_queue=queue)
        verb = "update" if verb == "unchanged" else verb
        notes.append(f"default queue of quota {quota.name} (namespace {namespace})")
    return verb, "; ".join(notes)

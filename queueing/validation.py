"""Rules that keep the quota tree sound.

Every rule names the field and the numbers, so a person can fix the input. Forms and
serializers show these errors as they are; nothing is saved when one is raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from queueing.choices import ACTIVE_PHASES
from queueing.models import Quota, Workload
from queueing.models.tenancy import dns_label
from queueing.quantities import (
    QuantityError,
    format_amount,
    parse_resources,
    validate_resource_name,
)


class Amounts(dict[str, int]):
    """A resource map in canonical integer units (cpu in millicores, memory in bytes),
    parsed once where it came in: a form's or serializer's quantity field
    (``parse_amounts``), or a row read back from the database (``canonical``).

    Actions take an ``Amounts`` as it is; any other map (commands, tests, manifests
    typing "4" or "500m") they parse themselves. Never re-parse an ``Amounts``: its
    integers are canonical, and "4" cpu parsed again would be 4 cores, not 4 millicores.
    """


def parse_amounts(values: Mapping[str, Any] | None) -> Amounts:
    """Typed quantities -> canonical amounts; QuantityError names the resource and value."""
    return Amounts(parse_resources(values))


def as_amounts(values: Mapping[str, Any] | None) -> Amounts:
    """``values`` as canonical amounts: an ``Amounts`` as it is, anything else parsed."""
    return values if isinstance(values, Amounts) else parse_amounts(values)


def canonical(values: Mapping[str, Any] | None) -> Amounts:
    """Amounts that are canonical already (read from a row): checked, never parsed."""
    out = Amounts()
    for resource, amount in (values or {}).items():
        validate_resource_name(str(resource))
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise QuantityError(f"{resource}: {amount!r} is not a canonical amount.")
        out[str(resource)] = amount
    return out


@dataclass
class QuotaProposal:
    """The state a quota would have after a create or an edit."""

    name: str
    tenant_id: int | None
    parent_id: int | None
    min: dict[str, int] = field(default_factory=dict)
    max: dict[str, int] = field(default_factory=dict)
    shared_weight: dict[str, int] = field(default_factory=dict)
    allow_lent: bool = True
    namespaces: list[str] = field(default_factory=list)
    fair_weight: float = 1.0


class Errors:
    """Collects messages per field, then raises one ValidationError."""

    def __init__(self) -> None:
        self.by_field: dict[str, list[str]] = {}

    def add(self, name: str, message: str) -> None:
        self.by_field.setdefault(name, []).append(message)

    def raise_if_any(self) -> None:
        if self.by_field:
            raise ValidationError(self.by_field)


def fmt(resource: str, amount: int) -> str:
    return format_amount(resource, amount)


def _check_map(errors: Errors, name: str, values: Any, *, allow_float: bool = False) -> None:
    if not isinstance(values, Mapping):
        errors.add(name, f"{name} must be a map of resource name to amount.")
        return
    for resource, amount in values.items():
        try:
            validate_resource_name(resource)
        except QuantityError as exc:
            errors.add(name, f"{name}: {exc}")
            continue
        if isinstance(amount, bool) or not isinstance(amount, int):
            errors.add(name, f"{name} {resource} must be a whole amount, not {amount!r}.")
        elif amount < 0:
            errors.add(name, f"{name} {resource} is {amount}; amounts cannot be negative.")


def effective_max(quota: Quota, resource: str) -> int | None:
    """The ceiling on a resource along the chain: the nearest ancestor that sets one."""
    node: Quota | None = quota
    while node is not None:
        if resource in node.max:
            return int(node.max[resource])
        node = node.parent
    return None


def _guarantee(parent: Quota, resource: str) -> int | None:
    """What a parent guarantees its children in total; None = no limit (a bare root)."""
    if resource in parent.min:
        return int(parent.min[resource])
    if parent.parent_id is None:
        return int(parent.max[resource]) if resource in parent.max else None
    return 0


def validate_quota(proposal: QuotaProposal, instance: Quota | None = None) -> None:
    """Refuse a quota that would break the tree. Raises ValidationError by field."""
    errors = Errors()
    try:
        dns_label(proposal.name)
    except ValidationError as exc:
        errors.add("name", " ".join(exc.messages))
    for name in ("min", "max", "shared_weight"):
        _check_map(errors, name, getattr(proposal, name))
    errors.raise_if_any()

    for resource, low in proposal.min.items():
        high = proposal.max.get(resource)
        if high is not None and low > high:
            errors.add(
                "min",
                f"min {resource} ({fmt(resource, low)}) is more than max {resource} "
                f"({fmt(resource, high)}).",
            )

    others = Quota.objects.exclude(id=instance.id) if instance else Quota.objects.all()
    if others.filter(name=proposal.name).exists():
        errors.add("name", f"A quota named {proposal.name!r} already exists.")

    parent: Quota | None = None
    if proposal.parent_id is not None:
        parent = Quota.objects.select_related("parent").filter(id=proposal.parent_id).first()
        if parent is None:
            errors.add("parent", f"Parent quota #{proposal.parent_id} does not exist.")
    if parent is not None:
        _check_parent(errors, proposal, instance, parent)
    if instance is not None:
        _check_children(errors, proposal, instance)
    _check_namespaces(errors, proposal, instance)
    errors.raise_if_any()


def _check_parent(
    errors: Errors, proposal: QuotaProposal, instance: Quota | None, parent: Quota
) -> None:
    # No cycles: the new parent must not be this quota or one of its descendants.
    node: Quota | None = parent
    seen: set[int] = set()
    while node is not None:
        if instance is not None and node.id == instance.id:
            errors.add("parent", f"{parent.name!r} is {proposal.name!r} or below it: a cycle.")
            return
        if node.id in seen:  # a pre-existing cycle; refuse to build on it
            errors.add("parent", f"The chain above {parent.name!r} loops.")
            return
        seen.add(node.id)
        node = node.parent

    if parent.tenant_id is not None and proposal.tenant_id != parent.tenant_id:
        errors.add(
            "tenant",
            f"A quota under {parent.name!r} must belong to the same tenant as it.",
        )
    if Workload.objects.filter(quota=parent, phase__in=ACTIVE_PHASES).exists():
        errors.add(
            "parent",
            f"{parent.name!r} holds workloads; only quotas without workloads can have children.",
        )

    for resource, high in proposal.max.items():
        ceiling = effective_max(parent, resource)
        if ceiling is not None and high > ceiling:
            errors.add(
                "max",
                f"max {resource} ({fmt(resource, high)}) is more than the parent "
                f"{parent.name!r} allows ({fmt(resource, ceiling)}).",
            )

    siblings = Quota.objects.filter(parent=parent)
    if instance is not None:
        siblings = siblings.exclude(id=instance.id)
    sibling_mins = [q.min for q in siblings.only("min")]
    for resource, asked in proposal.min.items():
        guarantee = _guarantee(parent, resource)
        if guarantee is None or asked == 0:
            continue
        taken = sum(int(m.get(resource, 0)) for m in sibling_mins)
        if taken + asked > guarantee:
            errors.add(
                "min",
                f"min {resource} ({fmt(resource, asked)}) plus its siblings' "
                f"({fmt(resource, taken)}) is more than the parent {parent.name!r} "
                f"guarantees ({fmt(resource, guarantee)}).",
            )


def _check_children(errors: Errors, proposal: QuotaProposal, instance: Quota) -> None:
    children = list(Quota.objects.filter(parent=instance).only("name", "min", "max"))
    if not children:
        return
    pretend = Quota(
        id=instance.id,
        name=proposal.name,
        parent_id=proposal.parent_id,
        min=proposal.min,
        max=proposal.max,
    )
    resources = {r for child in children for r in child.min}
    for resource in sorted(resources):
        total = sum(int(child.min.get(resource, 0)) for child in children)
        guarantee = _guarantee(pretend, resource)
        if guarantee is not None and total > guarantee:
            errors.add(
                "min",
                f"its children are guaranteed {resource} {fmt(resource, total)} in total, "
                f"more than min {resource} ({fmt(resource, guarantee)}).",
            )
    for child in children:
        for resource, high in child.max.items():
            ceiling = proposal.max.get(resource)
            if ceiling is not None and int(high) > ceiling:
                errors.add(
                    "max",
                    f"max {resource} ({fmt(resource, ceiling)}) is less than its child "
                    f"{child.name!r} allows ({fmt(resource, int(high))}).",
                )


def _check_namespaces(errors: Errors, proposal: QuotaProposal, instance: Quota | None) -> None:
    if not isinstance(proposal.namespaces, list):
        errors.add("namespaces", "namespaces must be a list of names.")
        return
    for namespace in proposal.namespaces:
        try:
            dns_label(namespace)
        except ValidationError:
            errors.add("namespaces", f"{namespace!r} is not a Kubernetes namespace name.")
    if len(set(proposal.namespaces)) != len(proposal.namespaces):
        errors.add("namespaces", "A namespace is listed twice.")
    owners = Quota.objects.exclude(id=instance.id) if instance else Quota.objects.all()
    for other in owners.exclude(namespaces=[]).only("name", "namespaces"):
        clash = sorted(set(other.namespaces) & set(proposal.namespaces))
        if clash:
            errors.add(
                "namespaces",
                f"Namespace {clash[0]!r} already belongs to quota {other.name!r}.",
            )


def summarize(resources: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{r} {fmt(r, a)}" for r, a in resources)

"""Forms parse what people type; queueing.actions validate, save and audit.

A form never saves a model. Quantities are parsed cell by cell here, once, so an error
sits next to the number that caused it; the action receives canonical ``Amounts`` and
does not parse them again. The action's own ValidationError (which names fields and
numbers) is attached back to the form with apply_validation_error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Field
from django.utils.crypto import salted_hmac

from queueing.choices import Policy, ReclaimPolicy, Role, Source, WithinQuotaPreemption
from queueing.models import Queue, Quota, Tenant
from queueing.quantities import QuantityError, format_amount, parse_amount, validate_resource_name
from queueing.validation import Amounts

FIELD_LABELS = {
    "min": "Min (guaranteed)",
    "max": "Max (ceiling)",
    "shared_weight": "Shared weight",
    "allow_lent": "Lend unused min",
    "fair_weight": "Fair-share weight",
    "namespaces": "Namespaces",
    "parent": "Parent quota",
    "tenant": "Tenant",
    "name": "Name",
    "default_queue": "Default queue",
}


# Which cell of the resource grid a phrase of a quota error names: "min cpu", "max memory".
_CELL_WORDS = {"min": "min", "max": "max", "shared weight": "weight", "weight": "weight"}


def grid_cells(message: str, grid: Any) -> list[tuple[Any, str]]:
    """The grid's (row form, cell) pairs a quota error concerns: "min cpu (9) is more than
    max cpu (8)" names both cpu cells; "max cpu (900) is more than the parent ..." one."""
    found = []
    for row in getattr(grid, "forms", ()):
        data = getattr(row, "cleaned_data", None) or {}
        resource = data.get("resource") or row.initial.get("resource")
        if not resource:
            continue
        words = "|".join(re.escape(w) for w in _CELL_WORDS)
        for match in re.finditer(rf"\b({words}) {re.escape(resource)}\b", message):
            cell = (row, _CELL_WORDS[match.group(1)])
            if cell not in found:
                found.append(cell)
    return found


def apply_validation_error(form: forms.Form, exc: ValidationError, grid: Any = None) -> None:
    """Attach an action's ValidationError to the form, by field where the form has one;
    with a resource ``grid``, on the cells a message names (min above max marks both)."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.error_dict.items():
            messages = [m for e in errors for m in e.messages]
            target = field if field in form.fields else None
            for message in messages:
                cells = grid_cells(message, grid) if grid is not None else []
                if cells and target is None:
                    for row, key in cells:
                        row.add_error(key, message)
                elif target is None and field not in ("__all__",):
                    label = FIELD_LABELS.get(field, field)
                    form.add_error(None, f"{label}: {message}")
                else:
                    form.add_error(target, message)
    else:
        for message in exc.messages:
            form.add_error(None, message)


# --- queues --------------------------------------------------------------------------


def _default(name: str) -> Any:
    """A queue setting's default: the model's, the one place defaults live (the API's
    serializer takes them from the model too)."""
    field = Queue._meta.get_field(name)
    assert isinstance(field, Field)
    return field.get_default()


class QueueForm(forms.Form):
    """A queue's policy. ``version`` carries optimistic concurrency."""

    name = forms.CharField(max_length=63, help_text="A Kubernetes name; it cannot change later.")
    policy = forms.ChoiceField(choices=Policy.choices, initial=_default("policy"))
    priority = forms.IntegerField(
        initial=_default("priority"), help_text=Queue._meta.get_field("priority").help_text
    )
    priority_threshold = forms.IntegerField(
        initial=_default("priority_threshold"),
        help_text="Intelligent: workloads at or above this priority block the queue.",
    )
    max_depth = forms.IntegerField(
        min_value=0,
        initial=_default("max_depth"),
        help_text="How far the cycle looks past the head; 0 = no limit.",
    )
    preempt_within_quota = forms.ChoiceField(
        choices=WithinQuotaPreemption.choices, initial=_default("preempt_within_quota")
    )
    reclaim = forms.ChoiceField(choices=ReclaimPolicy.choices, initial=_default("reclaim"))
    admission_timeout_s = forms.IntegerField(
        min_value=1,
        required=False,
        label="Admission timeout (s)",
        help_text="Requeue an admitted workload that has not started after this long; blank = never.",
    )
    backoff_base_s = forms.FloatField(label="Backoff base (s)", initial=_default("backoff_base_s"))
    backoff_max_s = forms.FloatField(label="Backoff max (s)", initial=_default("backoff_max_s"))
    backoff_jitter = forms.FloatField(
        label="Backoff jitter (0 to 1)", initial=_default("backoff_jitter")
    )
    aging_bound_s = forms.FloatField(
        min_value=0,
        max_value=7 * 24 * 3600,
        required=False,
        label="Aging bound (s)",
        initial=_default("aging_bound_s"),
        help_text=(
            "Against starvation: a head that fits waits at most about this long before it "
            "claims its whole request back from borrowing siblings; blank = off."
        ),
    )
    max_execution_s = forms.IntegerField(
        min_value=1,
        max_value=366 * 24 * 3600,
        required=False,
        label="Maximum execution time (s)",
        help_text=(
            "Stop a workload once it has held its admission this long (a workload's own "
            "shorter limit wins); blank = no limit."
        ),
    )
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, instance: Queue | None = None, **kwargs: Any) -> None:
        if instance is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": instance.name,
                "version": instance.version,
                **{key: getattr(instance, key) for key in QUEUE_FIELDS},
            }
        super().__init__(*args, **kwargs)
        self.instance = instance
        if instance is not None:
            self.fields["name"].disabled = True
            self.fields["name"].required = False


QUEUE_FIELDS = (
    "policy",
    "priority",
    "priority_threshold",
    "max_depth",
    "preempt_within_quota",
    "reclaim",
    "admission_timeout_s",
    "backoff_base_s",
    "backoff_max_s",
    "backoff_jitter",
    "aging_bound_s",
    "max_execution_s",
)


# --- quotas --------------------------------------------------------------------------


class ResourceRowForm(forms.Form):
    """One resource of a quota: its min, max and shared weight as typed quantities."""

    resource = forms.CharField(max_length=253, required=False)
    min = forms.CharField(max_length=64, required=False)
    max = forms.CharField(max_length=64, required=False)
    weight = forms.CharField(max_length=64, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        name = (data.get("resource") or "").strip()
        values = {key: (data.get(key) or "").strip() for key in ("min", "max", "weight")}
        if not name:
            if any(values.values()):
                self.add_error("resource", "Name the resource these amounts are for.")
            return data
        try:
            validate_resource_name(name)
        except QuantityError as exc:
            self.add_error("resource", str(exc))
            return data
        data["resource"] = name
        for key, text in values.items():
            data[key] = None
            if not text:
                continue
            try:
                data[key] = parse_amount(name, text)
            except QuantityError as exc:
                self.add_error(key, f"{key} {exc}")
        return data


class BaseResourceFormSet(forms.BaseFormSet):
    def clean(self) -> None:
        if any(self.errors):
            return
        seen: set[str] = set()
        for form in self.forms:
            name = form.cleaned_data.get("resource")
            if not name:
                continue
            if name in seen:
                form.add_error("resource", f"{name} is listed twice.")
            seen.add(name)

    def maps(self) -> dict[str, Amounts]:
        """The parsed amounts as the action takes them: {"min": {...}, "max": ..., ...}."""
        out = {"min": Amounts(), "max": Amounts(), "shared_weight": Amounts()}
        for form in self.forms:
            data = form.cleaned_data
            name = data.get("resource")
            if not name:
                continue
            for key, target in (("min", "min"), ("max", "max"), ("weight", "shared_weight")):
                if data.get(key) is not None:
                    out[target][name] = data[key]
        return out


ResourceFormSet = forms.formset_factory(
    ResourceRowForm, formset=BaseResourceFormSet, extra=2, max_num=64, validate_max=True
)


def resource_initial(quota: Quota | None, parent: Quota | None = None) -> list[dict[str, str]]:
    """One row per resource the quota (or its parent) names, cpu/memory/gpu first."""
    from portal.queries import resource_order

    names: set[str] = {"cpu", "memory"}
    for node in (quota, parent):
        if node is not None:
            names |= set(node.min) | set(node.max) | set(node.shared_weight)
    rows = []
    for name in resource_order(names):
        row = {"resource": name, "min": "", "max": "", "weight": ""}
        if quota is not None:
            if name in quota.min:
                row["min"] = format_amount(name, int(quota.min[name]))
            if name in quota.max:
                row["max"] = format_amount(name, int(quota.max[name]))
            if name in quota.shared_weight:
                row["weight"] = format_amount(name, int(quota.shared_weight[name]))
        rows.append(row)
    return rows


class QuotaForm(forms.Form):
    """The scalar parts of a quota; the resource grid is a ResourceFormSet beside it."""

    name = forms.CharField(max_length=63, required=False)
    parent = forms.ModelChoiceField(queryset=Quota.objects.none(), required=False)
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.all(), required=False, help_text="Blank for a cluster quota."
    )
    allow_lent = forms.BooleanField(
        required=False,
        initial=True,
        label="Lend unused min to siblings",
        help_text="Off: the quota keeps its whole min even when idle.",
    )
    fair_weight = forms.FloatField(
        required=False,
        initial=1.0,
        label="Fair-share weight",
        help_text=(
            "Greater than 0, at most 1000 (blank: unchanged, 1 for a new quota). Quotas are "
            "served in order of used ÷ runtime quota ÷ weight: weight 2 goes first until it "
            "holds twice as much."
        ),
    )
    namespaces = forms.CharField(
        required=False,
        help_text="Namespaces whose workloads default to this quota, separated by commas.",
    )
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)
    preview_digest = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(
        self,
        *args: Any,
        instance: Quota | None = None,
        parents: Sequence[Quota] = (),
        tenants: Sequence[Tenant] | None = None,
        **kwargs: Any,
    ) -> None:
        if instance is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": instance.name,
                "allow_lent": instance.allow_lent,
                "fair_weight": instance.fair_weight,
                "namespaces": ", ".join(instance.namespaces),
                "version": instance.version,
            }
        super().__init__(*args, **kwargs)
        self.instance = instance
        parent_field = self.fields["parent"]
        assert isinstance(parent_field, forms.ModelChoiceField)
        parent_field.queryset = Quota.objects.filter(pk__in=[p.pk for p in parents])
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)
        if tenants is None:
            del self.fields["tenant"]
        else:
            tenant_field.queryset = Tenant.objects.filter(pk__in=[t.pk for t in tenants])
        if instance is not None:
            for name in ("name", "parent", "tenant"):
                self.fields.pop(name, None)
        else:
            self.fields["name"].required = True
            self.fields["name"].help_text = "A Kubernetes name, unique in the cluster."
            for name in ("version", "preview_digest"):
                self.fields.pop(name, None)

    def clean_namespaces(self) -> list[str]:
        text = self.cleaned_data.get("namespaces") or ""
        return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]


def preview_digest(quota: Quota, changes: Mapping[str, Any]) -> str:
    """Binds a Save to the exact values (and version) that were previewed."""
    payload = json.dumps({"quota": quota.pk, "version": quota.version, **changes}, sort_keys=True)
    return salted_hmac("kq.quota-preview", payload).hexdigest()


# --- memberships -----------------------------------------------------------------------


class MembershipForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)

    def clean_username(self) -> Any:
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise ValidationError(
                f"There is no user {username!r}; an administrator creates accounts."
            )
        return user


# --- audit ---------------------------------------------------------------------------


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(required=False)
    object_type = forms.ChoiceField(required=False, label="Object")
    actor = forms.CharField(required=False, max_length=150, label="Who")
    source = forms.ChoiceField(
        required=False, choices=[("", "Any source"), *Source.choices], label="Through"
    )
    q = forms.CharField(required=False, max_length=200, label="Object name contains")
    since = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="Until", widget=forms.DateInput(attrs={"type": "date"})
    )
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.all(), required=False, empty_label="Any tenant"
    )

    def __init__(
        self, *args: Any, actions: Sequence[str], types: Sequence[str], all_tenants: bool, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        action_field = self.fields["action"]
        assert isinstance(action_field, forms.ChoiceField)
        action_field.choices = [("", "Any action"), *((a, a) for a in actions)]
        type_field = self.fields["object_type"]
        assert isinstance(type_field, forms.ChoiceField)
        type_field.choices = [("", "Any object"), *((t, t) for t in types)]
        if not all_tenants:
            del self.fields["tenant"]


class TokenForm(forms.Form):
    """A new personal API token."""

    name = forms.CharField(
        max_length=100, required=False, help_text="What the token is for, e.g. ci-pipeline."
    )
    read_only = forms.BooleanField(
        required=False, label="Read-only", help_text="May read and preview, never change."
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label="Expires in (days)",
        help_text="Leave empty for a token that does not expire.",
    )

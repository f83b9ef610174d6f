"""Quota forms: create, and edit through a what-if preview.

Editing is two steps. "Preview" validates the typed quantities and runs the engine on a
modified snapshot (queueing.whatif, nothing saved), showing how runtime quotas,
positions and ETAs would change; "Save" is offered only for the values just previewed
(a digest binds them) and goes through actions.update_quota with the version the edit
started from, so a stale edit is refused rather than overwriting someone else's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.crypto import constant_time_compare

from portal import queries
from portal.forms import (
    BaseResourceFormSet,
    QuotaForm,
    ResourceFormSet,
    apply_validation_error,
    preview_digest,
    resource_initial,
)
from portal.templatetags.kq import as_datetime
from portal.views.common import require_cluster_admin, visible_tenant_or_404
from queueing import access, actions, whatif
from queueing.actions import ActionError, Actor, ConflictError
from queueing.choices import Role, Source
from queueing.models import Quota, Tenant
from queueing.quantities import parse_amount

PREVIEW_ROWS = 100


def quota_for_edit(request: HttpRequest, tenant: Tenant | None, name: str) -> Quota:
    quota = Quota.objects.select_related("parent", "tenant").filter(name=name).first()
    if quota is None or quota.tenant_id != (tenant.pk if tenant else None):
        raise Http404("No such quota.")
    if not access.can_edit_quota(request.user, quota):
        raise PermissionDenied(why_not_edit(request, quota))
    return quota


def why_not_edit(request: HttpRequest, quota: Quota) -> str:
    """The real reason this user may not edit this quota, naming their role."""
    if quota.tenant_id is None:
        return "Only cluster admins edit the cluster's quotas."
    parent_tenant = quota.parent.tenant_id if quota.parent is not None else None
    if parent_tenant != quota.tenant_id:
        return (
            f"{quota.name} is the top quota of {quota.tenant}, its entitlement: only cluster "
            "admins edit it; tenant admins edit the quotas below it."
        )
    role = access.role_in(request.user, quota.tenant_id) or "not a member"
    return (
        f"You are {role} of {quota.tenant}; only its admins (and cluster admins) edit its quotas."
    )


def back_url(tenant: Tenant | None) -> str:
    return reverse("tenant", args=[tenant.name]) if tenant else reverse("cluster")


# --- edit with preview ---------------------------------------------------------------


@login_required
def quota_edit(request: HttpRequest, quota: str, name: str | None = None) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name) if name else None
    if tenant is None:
        require_cluster_admin(request)
    current = quota_for_edit(request, tenant, quota)
    context: dict[str, Any] = {
        "tenant": tenant,
        "quota": current,
        "back_url": back_url(tenant),
    }
    if request.method != "POST":
        context["form"] = QuotaForm(instance=current)
        context["resources"] = ResourceFormSet(
            initial=resource_initial(current, current.parent), prefix="res"
        )
        return render(request, "portal/quota_form.html", context)

    form = QuotaForm(request.POST, instance=current)
    formset = cast(
        BaseResourceFormSet,
        ResourceFormSet(
            request.POST, initial=resource_initial(current, current.parent), prefix="res"
        ),
    )
    context.update(form=form, resources=formset)
    if not (form.is_valid() and formset.is_valid()):
        return render(request, "portal/quota_form.html", context, status=400)

    data = form.cleaned_data
    changes: dict[str, Any] = {**formset.maps(), "allow_lent": data["allow_lent"]}
    if data.get("fair_weight") is not None:  # blank keeps the weight it has
        changes["fair_weight"] = data["fair_weight"]
    version = data.get("version") or current.version
    digest = preview_digest(current, {**changes, "namespaces": data["namespaces"]})
    wants_save = request.POST.get("action") == "save"
    previewed = constant_time_compare(data.get("preview_digest") or "", digest)

    if wants_save and previewed:
        try:
            saved = actions.update_quota(
                Actor.of(request.user, Source.UI),
                current,
                expected_version=version,
                namespaces=data["namespaces"],
                **changes,
            )
        except ValidationError as exc:
            apply_validation_error(form, exc, grid=formset)
            return render(request, "portal/quota_form.html", context, status=400)
        except ConflictError as exc:
            context["conflict"] = str(exc)
            return render(request, "portal/quota_form.html", context, status=409)
        except ActionError as exc:
            form.add_error(None, str(exc))
            return render(request, "portal/quota_form.html", context, status=400)
        messages.success(request, f"Quota {saved.name} saved (version {saved.version}).")
        return redirect(back_url(tenant))

    # Preview: the engine on a modified snapshot; nothing is saved.
    if wants_save:
        context["notice"] = (
            "The values changed since the last preview: check this preview, then save."
        )
    try:
        # What Save would refuse, said before the preview (the same check, not a copy).
        actions.check_version("Quota", current, version)
        # namespaces do not change the simulation, but validating them now keeps Save
        # from failing on something the preview did not mention.
        preview = whatif.preview_quota_change(
            current, {**changes, "namespaces": data["namespaces"]}
        )
    except ConflictError as exc:
        context["conflict"] = str(exc)
        return render(request, "portal/quota_form.html", context, status=409)
    except ValidationError as exc:
        apply_validation_error(form, exc, grid=formset)
        return render(request, "portal/quota_form.html", context, status=400)
    except ActionError as exc:
        form.add_error(None, str(exc))
        return render(request, "portal/quota_form.html", context, status=400)
    context["preview"] = preview_context(preview.as_dict(), preview.full_demand)
    bound = request.POST.copy()
    bound["preview_digest"] = digest
    context["form"] = QuotaForm(bound, instance=current)
    context["form"].is_valid()
    context["previewed"] = True
    return render(request, "portal/quota_form.html", context)


# For a waiting workload: a lower position, an earlier ETA, being admitted are better.
# For a quota: more runtime quota and more in use (admitted) are better for its workloads.
# The limits themselves (min, max) are the edit, neither better nor worse.
_LOWER_IS_BETTER = frozenset({"position", "global_position", "eta_p50", "eta_p90"})
_HIGHER_IS_BETTER = frozenset({"admitted", "runtime", "used"})


def direction(key: str, before: Any, after: Any) -> str:
    """ "better", "worse", "changed" (neither) or "" (no change), for the what-if colours."""
    if before == after:
        return ""
    if key in _LOWER_IS_BETTER:
        # Not ranked or no forecast (None) is the worst place to be.
        if before is None or after is None:
            return "better" if before is None else "worse"
        return "better" if after < before else "worse"
    if key in _HIGHER_IS_BETTER:
        b, a = int(before or 0), int(after or 0)
        return "better" if a > b else "worse" if a < b else ""
    return "changed"


def preview_context(
    data: Mapping[str, Any], full_demand: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Shape Preview.as_dict() for the template: changed quotas and workloads first; and
    what the edit would change under full demand (for when it changes nothing now)."""
    quotas = []
    for row in data.get("quotas", []):
        before, after = row.get("before") or {}, row.get("after") or {}
        names: set[str] = set()
        for side in (before, after):
            for key in ("runtime", "used", "min", "max"):
                names |= set(side.get(key) or {})
        lines = []
        for resource in queries.resource_order(names):
            cells = []
            for key in ("runtime", "used", "min", "max"):
                b = (before.get(key) or {}).get(resource)
                a = (after.get(key) or {}).get(resource)
                cells.append(
                    {"key": key, "before": b, "after": a, "changed": a != b,
                     "direction": direction(key, b, a)}
                )  # fmt: skip
            lines.append(
                {"resource": resource, "cells": cells, "changed": any(c["changed"] for c in cells)}
            )
        quotas.append(
            {"name": row.get("name"), "lines": lines, "changed": any(x["changed"] for x in lines)}
        )
    quotas.sort(key=lambda q: (not q["changed"], q["name"] or ""))

    workloads = []
    for row in data.get("workloads", []):
        before, after = row.get("before") or {}, row.get("after") or {}
        diff = {
            key: direction(key, before.get(key), after.get(key))
            for key in ("position", "global_position", "eta_p50", "eta_p90", "admitted")
        }
        workloads.append(
            {
                "id": row.get("id"),
                "name": row.get("name"),
                "queue": row.get("queue"),
                "before": {
                    **before,
                    "eta_p50": as_datetime(before.get("eta_p50")),
                    "eta_p90": as_datetime(before.get("eta_p90")),
                },
                "after": {
                    **after,
                    "eta_p50": as_datetime(after.get("eta_p50")),
                    "eta_p90": as_datetime(after.get("eta_p90")),
                },
                "diff": diff,
                "changed": any(diff.values()),
            }
        )
    changed = [w for w in workloads if w["changed"]]
    changed.sort(
        key=lambda w: (
            not w["after"].get("admitted"),
            w["after"].get("global_position") or 10**9,
            w["id"] or 0,
        )
    )
    summary = dict(data.get("summary") or {})
    facts = [
        (label, summary.get(f"{key}_before"), summary.get(f"{key}_after"))
        for key, label in (("admitted", "Admitted next cycle"), ("preempted", "Preempted"))
        if f"{key}_before" in summary or f"{key}_after" in summary
    ]
    return {
        "quotas": quotas,
        "changed_quotas": [q for q in quotas if q["changed"]],
        "unchanged_quotas": [q for q in quotas if not q["changed"]],
        "workloads": changed[:PREVIEW_ROWS],
        "workloads_changed": int(summary.get("changed_workloads", len(changed))),
        "quotas_changed": sum(1 for q in quotas if q["changed"]),
        "facts": facts,
        "full_demand": [
            {
                "name": row["name"],
                "lines": [
                    {
                        "resource": r,
                        "before": _amount(r, row["before"].get(r)),
                        "after": _amount(r, row["after"].get(r)),
                        "direction": direction(
                            "runtime",
                            _amount(r, row["before"].get(r)),
                            _amount(r, row["after"].get(r)),
                        ),
                    }
                    for r in queries.resource_order(set(row["before"]) | set(row["after"]))
                    if row["before"].get(r) != row["after"].get(r)
                ],
            }
            for row in full_demand
        ],
    }


def _amount(resource: str, text: Any) -> int:
    return parse_amount(resource, text) if text not in (None, "") else 0


# --- create --------------------------------------------------------------------------


@login_required
def quota_create(request: HttpRequest, name: str | None = None) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name) if name else None
    cluster_admin = access.is_cluster_admin(request.user)
    if tenant is None:
        require_cluster_admin(request)
    elif not access.has_role(request.user, tenant.pk, Role.ADMIN):
        raise PermissionDenied("Only tenant admins create quotas.")
    candidates = Quota.objects.select_related("parent").order_by("name")
    if not cluster_admin:
        candidates = candidates.filter(tenant=tenant)
    elif tenant is not None:
        candidates = candidates.filter(Q(tenant=tenant) | Q(tenant__isnull=True))
    parents = [q for q in candidates if access.can_create_quota_under(request.user, q)]
    tenants = list(Tenant.objects.all()) if cluster_admin and tenant is None else None
    initial_parent = None
    wanted = request.GET.get("parent")
    if wanted:
        initial_parent = next((p for p in parents if p.name == wanted), None)

    context: dict[str, Any] = {"tenant": tenant, "quota": None, "back_url": back_url(tenant)}
    if request.method != "POST":
        context["form"] = QuotaForm(
            parents=parents,
            tenants=tenants,
            initial={"parent": initial_parent, "allow_lent": True, "fair_weight": 1.0},
        )
        context["resources"] = ResourceFormSet(
            initial=resource_initial(None, initial_parent), prefix="res"
        )
        return render(request, "portal/quota_form.html", context)

    form = QuotaForm(request.POST, parents=parents, tenants=tenants)
    formset = cast(
        BaseResourceFormSet,
        ResourceFormSet(request.POST, initial=resource_initial(None, initial_parent), prefix="res"),
    )
    context.update(form=form, resources=formset)
    if form.is_valid() and formset.is_valid():
        data = form.cleaned_data
        parent = data.get("parent")
        if parent is None and not cluster_admin:
            form.add_error("parent", "Choose the quota this one divides.")
        else:
            maps = formset.maps()
            proposed = {
                "name": data["name"],
                "tenant": data.get("tenant") if tenants is not None else tenant,
                "parent": parent,
                "allow_lent": data["allow_lent"],
                "fair_weight": 1.0 if data.get("fair_weight") is None else data["fair_weight"],
                "namespaces": data["namespaces"],
                "min": maps["min"],
                "max": maps["max"],
                "shared_weight": maps["shared_weight"],
            }
            if request.POST.get("action") == "preview" and parent is not None:
                try:
                    preview = whatif.preview_quota_create(**proposed)
                except ValidationError as exc:
                    apply_validation_error(form, exc, grid=formset)
                except ActionError as exc:
                    form.add_error(None, str(exc))
                else:
                    context["preview"] = preview_context(preview.as_dict(), preview.full_demand)
                    return render(request, "portal/quota_form.html", context)
                return render(request, "portal/quota_form.html", context, status=400)
            try:
                created = actions.create_quota(Actor.of(request.user, Source.UI), **proposed)
            except ValidationError as exc:
                apply_validation_error(form, exc, grid=formset)
            except ActionError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Quota {created.name} created.")
                return redirect(back_url(tenant))
    return render(request, "portal/quota_form.html", context, status=400)

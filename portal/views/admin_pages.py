"""Memberships and the audit log."""

from __future__ import annotations

from datetime import datetime, time

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from portal import audit_text
from portal.forms import AuditFilterForm, MembershipForm, apply_validation_error
from portal.views.common import (
    page_number,
    require_cluster_admin,
    require_role,
    visible_tenant_or_404,
)
from queueing import actions
from queueing.actions import Actor
from queueing.choices import Role, Source
from queueing.models import AuditEvent, Membership


@login_required
def members(request: HttpRequest, name: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name)
    require_role(request, tenant, Role.ADMIN)
    actor = Actor.of(request.user, Source.UI)
    form = MembershipForm()
    status = 200
    if request.method == "POST":
        op = request.POST.get("op", "add")
        if op == "add":
            form = MembershipForm(request.POST)
            if form.is_valid():
                try:
                    actions.set_membership(
                        actor, tenant, form.cleaned_data["username"], form.cleaned_data["role"]
                    )
                except ValidationError as exc:
                    apply_validation_error(form, exc)
                else:
                    role = Role(form.cleaned_data["role"]).label.lower()
                    messages.success(
                        request,
                        f"{form.cleaned_data['username']} is now {_article(role)} {role} of {tenant}.",
                    )
                    return redirect("members", name=tenant.name)
            status = 400
        else:
            membership = Membership.objects.filter(
                tenant=tenant, pk=request.POST.get("membership") or 0
            ).first()
            if membership is None:
                raise Http404("No such membership.")
            try:
                if op == "remove":
                    actions.remove_membership(actor, membership)
                    messages.success(request, f"{membership.user} was removed from {tenant}.")
                else:
                    actions.set_membership(
                        actor, tenant, membership.user, request.POST.get("role", "")
                    )
                    role = Role(request.POST.get("role", "")).label.lower()
                    messages.success(
                        request, f"{membership.user} is now {_article(role)} {role} of {tenant}."
                    )
            except ValidationError as exc:
                messages.error(request, " ".join(exc.messages))
            except actions.ActionError as exc:
                messages.error(request, str(exc))
            return redirect("members", name=tenant.name)
    rows = (
        Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")
    )
    if request.method == "GET" and request.GET.get("partial") == "live":
        return render(
            request,
            "portal/_members_live.html",
            {"tenant": tenant, "memberships": rows, "roles": Role.choices},
        )
    return render(
        request,
        "portal/members.html",
        {"tenant": tenant, "memberships": rows, "form": form, "roles": Role.choices},
        status=status,
    )


@login_required
def audit(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """The audit log with filters: a tenant's for its admins, everything for cluster admins."""
    tenant = visible_tenant_or_404(request, name) if name else None
    if tenant is None:
        require_cluster_admin(request)
    else:
        require_role(request, tenant, Role.ADMIN)
    events = AuditEvent.objects.all()
    if tenant is not None:
        events = events.filter(tenant=tenant)
    form = AuditFilterForm(
        request.GET or None,
        actions=list(events.order_by("action").values_list("action", flat=True).distinct()),
        types=list(events.order_by("object_type").values_list("object_type", flat=True).distinct()),
        all_tenants=tenant is None,
    )
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        if data.get("action"):
            events = events.filter(action=data["action"])
        if data.get("object_type"):
            events = events.filter(object_type=data["object_type"])
        if data.get("actor"):
            events = events.filter(actor_name__icontains=data["actor"])
        if data.get("source"):
            events = events.filter(source=data["source"])
        if data.get("q"):
            events = events.filter(Q(object_repr__icontains=data["q"]) | Q(object_id=data["q"]))
        tz = timezone.get_current_timezone()
        if data.get("since"):
            events = events.filter(at__gte=datetime.combine(data["since"], time.min, tzinfo=tz))
        if data.get("until"):
            events = events.filter(at__lte=datetime.combine(data["until"], time.max, tzinfo=tz))
        if data.get("tenant"):
            events = events.filter(tenant=data["tenant"])
    page = Paginator(events.select_related("tenant").order_by("-at", "-id"), 50).get_page(
        page_number(request)
    )
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "portal/audit.html",
        {
            "tenant": tenant,
            "form": form,
            "page": page,
            "rows": audit_text.lines(list(page)),
            "query": query.urlencode(),
        },
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"

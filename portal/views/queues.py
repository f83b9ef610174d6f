"""The queue page (live admission order) and the queue policy forms."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from portal import queries
from portal.forms import QueueForm, apply_validation_error
from portal.views.common import page_number, require_role, role_flags, visible_tenant_or_404
from queueing import actions
from queueing.actions import ActionError, Actor, ConflictError
from queueing.choices import Role, Source
from queueing.models import Queue


def queue_or_404(tenant_id: int, name: str) -> Queue:
    queue = Queue.objects.filter(tenant_id=tenant_id, name=name).first()
    if queue is None:
        raise Http404("No such queue.")
    return queue


@login_required
def queue_page(request: HttpRequest, name: str, queue: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name)
    q = queue_or_404(tenant.pk, queue)
    window = queries.queue_window(q, page_number(request))
    context = {
        "tenant": tenant,
        "queue": q,
        "window": window,
        "quotas": sorted({row["quota"] for row in window.pending + window.holding}),
        "workload_url": reverse("workload", args=[tenant.name, 0]),
        "partial_url": reverse("queue", args=[tenant.name, q.name]) + f"?page={window.page}",
        **role_flags(request, tenant),
    }
    if request.GET.get("partial") == "rows":
        return render(request, "portal/_queue_live.html", context)
    return render(request, "portal/queue.html", context)


@login_required
def queue_edit(request: HttpRequest, name: str, queue: str | None = None) -> HttpResponse:
    """Create (queue is None) or edit a queue's policy. Tenant admins only."""
    tenant = visible_tenant_or_404(request, name)
    require_role(request, tenant, Role.ADMIN)
    current = queue_or_404(tenant.pk, queue) if queue else None
    actor = Actor.of(request.user, Source.UI)
    conflict = ""
    if request.method == "POST":
        form = QueueForm(request.POST, instance=current)
        if form.is_valid():
            data = form.cleaned_data
            settings = {key: data[key] for key in actions.QUEUE_EDITABLE}
            try:
                if current is None:
                    saved = actions.create_queue(
                        actor, tenant=tenant, name=data["name"], **settings
                    )
                    messages.success(request, f"Queue {saved.name} created.")
                else:
                    saved = actions.update_queue(
                        actor, current, expected_version=data["version"], **settings
                    )
                    messages.success(
                        request, f"Queue {saved.name} saved (version {saved.version})."
                    )
                return redirect("queue", name=tenant.name, queue=saved.name)
            except ValidationError as exc:
                apply_validation_error(form, exc)
            except ConflictError as exc:
                conflict = str(exc)
            except ActionError as exc:
                form.add_error(None, str(exc))
    else:
        form = QueueForm(instance=current)
    if current is not None:
        current.refresh_from_db()
    status = 409 if conflict else (400 if form.errors else 200)
    return render(
        request,
        "portal/queue_form.html",
        {"tenant": tenant, "queue": current, "form": form, "conflict": conflict},
        status=status,
    )

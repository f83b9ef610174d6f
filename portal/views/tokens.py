"""Personal API tokens: create (the key is shown once) and revoke. Only your own."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from portal import tokens
from portal.forms import TokenForm, apply_validation_error
from portal.models import APIToken
from queueing.actions import Actor
from queueing.choices import Source


@login_required
def token_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    if not isinstance(user, User):  # login_required lets only signed-in users through
        raise PermissionDenied
    actor = Actor.of(user, Source.UI)
    form = TokenForm()
    new_key = None
    status = 200
    if request.method == "POST":
        if request.POST.get("op") == "revoke":
            token = APIToken.objects.filter(user=user, pk=request.POST.get("token") or 0).first()
            if token is None:
                raise Http404("No such token.")
            tokens.revoke_token(actor, token)
            messages.success(request, f"Token {token.prefix}… was revoked; it no longer works.")
            return redirect("tokens")
        form = TokenForm(request.POST)
        if form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            try:
                created = tokens.create_token(
                    actor,
                    user,
                    name=form.cleaned_data["name"],
                    read_only=form.cleaned_data["read_only"],
                    expires_at=timezone.now() + timedelta(days=days) if days else None,
                )
            except ValidationError as exc:
                apply_validation_error(form, exc)
                status = 400
            else:
                new_key = created.key
                form = TokenForm()
        else:
            status = 400
    rows = APIToken.objects.filter(user=user)
    return render(
        request,
        "portal/tokens.html",
        {"form": form, "tokens": rows, "new_key": new_key, "now": timezone.now()},
        status=status,
    )

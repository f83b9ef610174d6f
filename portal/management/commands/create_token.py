"""`python manage.py create_token <user> [--read-only]`: print a new personal API token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from portal import tokens
from queueing.actions import Actor
from queueing.choices import Source


class Command(BaseCommand):
    help = "Create a personal API token for a user and print its key (shown only once)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--read-only", action="store_true", help="May only read.")
        parser.add_argument("--name", default="", help="What the token is for.")
        parser.add_argument(
            "--expires-in-days", type=float, default=None, help="Expire after this many days."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        try:
            user = users.objects.get(**{users.USERNAME_FIELD: options["username"]})
        except users.DoesNotExist as exc:
            raise CommandError(f"No user named {options['username']!r}.") from exc
        days = options["expires_in_days"]
        if days is not None and days <= 0:
            raise CommandError("--expires-in-days must be positive.")
        expires_at = timezone.now() + timedelta(days=days) if days is not None else None
        try:
            new = tokens.create_token(
                Actor(None, Source.SYSTEM, "manage.py create_token"),
                user,
                name=options["name"] or "created with manage.py create_token",
                read_only=options["read_only"],
                expires_at=expires_at,
            )
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        # The key alone on stdout, so `TOKEN=$(python manage.py create_token ada)` works.
        self.stdout.write(new.key)

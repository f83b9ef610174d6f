"""What every viewset shares: permissions by role, stable ordering, optimistic concurrency."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, viewsets
from rest_framework.filters import OrderingFilter
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from portal.api.errors import PreconditionFailed
from portal.api.pagination import Pagination
from portal.api.permissions import TokenScope
from queueing.actions import Actor, ConflictError
from queueing.choices import Source


def actor(request: Request) -> Actor:
    return Actor.of(request.user, Source.API)


class StableOrderingFilter(OrderingFilter):
    """``?ordering=-priority,name``; ties always break on id so pages never overlap."""

    def get_ordering(self, request: Request, queryset: QuerySet, view: Any) -> Sequence[str]:
        ordering = list(super().get_ordering(request, queryset, view) or ["id"])
        if not any(field.lstrip("-") in ("id", "pk") for field in ordering):
            ordering.append("-id" if ordering[0].startswith("-") else "id")
        return ordering


class BaseViewSet(viewsets.GenericViewSet):
    """Shared behaviour; subclasses say who may create, change and delete."""

    permission_classes = [IsAuthenticated, TokenScope]
    pagination_class = Pagination
    filter_backends = [DjangoFilterBackend, StableOrderingFilter]
    ordering_fields: Sequence[str] = ("id",)
    ordering: Sequence[str] = ("id",)
    named = False  # objects with a unique ``name`` may be addressed by it
    lookup_value_regex = "[0-9]+"

    # --- permissions (override) -------------------------------------------------------------
    def may_create(self, serializer: BaseSerializer) -> bool:
        return False

    def may_change(self, obj: Any) -> bool:
        return False

    def may_delete(self, obj: Any) -> bool:
        return self.may_change(obj)

    # --- lookups ----------------------------------------------------------------------------
    def get_object(self) -> Any:
        value = str(self.kwargs[self.lookup_url_kwarg or self.lookup_field])
        found: dict[str, Any]
        if value.isdigit():
            found = {"pk": int(value)}
        elif self.named and "\x00" not in value:
            found = {"name": value}
        else:
            raise exceptions.NotFound()
        obj = self.get_queryset().filter(**found).first()
        if obj is None:
            raise exceptions.NotFound()
        self.check_object_permissions(self.request, obj)
        return obj

    def check_object_permissions(self, request: Request, obj: Any) -> None:
        super().check_object_permissions(request, obj)
        if request.method == "DELETE":
            allowed = self.may_delete(obj)
        elif request.method in ("PUT", "PATCH") or (
            request.method == "POST" and self.detail_write(self.action)
        ):
            allowed = self.may_change(obj)
        else:
            allowed = True
        if not allowed:
            raise exceptions.PermissionDenied("Your role does not allow this.")

    def detail_write(self, action_name: str | None) -> bool:
        """POST actions on an object that change it (cancel); override to list them."""
        return False

    # --- lists ------------------------------------------------------------------------------
    def decorate(self, objects: Sequence[Any]) -> None:
        """Attach what the serializer needs for a page of objects (one query, not N)."""

    def paginate_queryset(self, queryset: Any) -> list[Any] | None:
        page = super().paginate_queryset(queryset)
        if page is not None and self.action == "list":
            self.decorate(page)
        return page

    # --- writes -----------------------------------------------------------------------------
    def perform_create(self, serializer: BaseSerializer) -> None:
        if not self.may_create(serializer):
            raise exceptions.PermissionDenied("Your role does not allow this.")
        serializer.save()

    def perform_destroy(self, instance: Any) -> None:
        raise NotImplementedError


# Mixins see the viewset's attributes when type-checked, and stay plain mixins at runtime.
if TYPE_CHECKING:
    _ViewSet = BaseViewSet
else:
    _ViewSet = object


class VersionedMixin(_ViewSet):
    """Optimistic concurrency for objects with a ``version``.

    Send the version you read either in the body (``"version": 3``; stale -> 409) or as
    ``If-Match: "3"`` (the ETag of the GET; stale -> 412). Nothing changes on a refusal.
    """

    versioned = True

    def if_match(self) -> int | None:
        header = self.request.headers.get("If-Match")
        if header is None or header.strip() == "*":
            return None
        value = header.split(",")[0].strip()
        value = value.removeprefix("W/").strip('"')
        if not value.isdigit():
            raise PreconditionFailed(f"If-Match {header!r} is not a version this API issued.")
        return int(value)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if self.request is not None and self.request.method in ("PUT", "PATCH"):
            expected = self.if_match()
            if expected is not None:
                body = (
                    self.request.data.get("version")
                    if isinstance(self.request.data, dict)
                    else None
                )
                if body is not None and body != expected:
                    raise exceptions.ValidationError(
                        {"version": [f"version {body} and If-Match {expected} disagree."]}
                    )
                context["expected_version"] = expected
        return context

    def perform_update(self, serializer: BaseSerializer) -> None:
        try:
            serializer.save()
        except ConflictError as exc:
            if self.request.headers.get("If-Match") not in (None, "*"):
                raise PreconditionFailed(str(exc)) from exc
            raise

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any):
        response = super().finalize_response(request, response, *args, **kwargs)
        data = getattr(response, "data", None)
        if (
            getattr(self, "detail", False)
            and response.status_code < 300
            and isinstance(data, dict)
            and "version" in data
        ):
            response["ETag"] = f'"{data["version"]}"'
        return response

    def expected_for_delete(self) -> int | None:
        return self.if_match()

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            return super().destroy(request, *args, **kwargs)  # type: ignore[misc]
        except ConflictError as exc:
            raise PreconditionFailed(str(exc)) from exc


#: The OpenAPI schema of a versioned object's writes: each takes ``If-Match``.
if_match_schema = extend_schema_view(
    **{
        name: extend_schema(parameters=[OpenApiParameter("If-Match", str, "header")])
        for name in ("update", "partial_update", "destroy")
    }
)


class VersionedCrudViewSet(
    VersionedMixin,
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """List, read, create, change (versioned) and delete: the quotas' and queues' API.
    Decorate a subclass with ``if_match_schema`` so its writes document ``If-Match``."""

"""GET /api/v1/me/: who the caller is and what they may do."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.permissions import TokenScope
from portal.models import APIToken
from queueing import access
from queueing.events import iso
from queueing.models import (
    Tenant,
)


class MeView(APIView):
    """Who you are to the API: your roles per tenant and the scope of the token you use."""

    permission_classes = [IsAuthenticated, TokenScope]

    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        roles = access.roles_by_tenant(request.user)
        names = dict(Tenant.objects.filter(id__in=roles).values_list("id", "name"))
        token = request.auth if isinstance(request.auth, APIToken) else None
        return Response(
            {
                "username": request.user.get_username(),
                "cluster_admin": access.is_cluster_admin(request.user),
                "roles": {names[tenant_id]: role for tenant_id, role in roles.items()},
                "token": {
                    "prefix": token.prefix,
                    "read_only": token.read_only,
                    "expires_at": iso(token.expires_at),
                }
                if token
                else None,
            }
        )

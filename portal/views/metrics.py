"""GET /metrics: Prometheus text format. Scrapers authenticate with KQ_METRICS_TOKEN;
cluster admins can also look in a browser session."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from queueing import access
from queueing.metrics import KoordQueueCollector

_registry = CollectorRegistry(auto_describe=False)
_registry.register(KoordQueueCollector())


def _authorised(request: HttpRequest) -> bool:
    token = settings.KQ_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer ") and hmac.compare_digest(header[7:], token):
        return True
    return access.is_cluster_admin(request.user)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _authorised(request):
        return HttpResponse(
            "Send Authorization: Bearer <KQ_METRICS_TOKEN>.\n",
            status=401,
            content_type="text/plain",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return HttpResponse(generate_latest(_registry), content_type=CONTENT_TYPE_LATEST)

"""The mutating admission webhook's HTTP side: the Kubernetes API server POSTs an
AdmissionReview for each create of a managed kind; the answer suspends the job (and
stamps it enqueued) so that none of its pods starts before the queue admits it.

Served by the ASGI application like every page; in a cluster a second uvicorn process
serves it over TLS (deploy/webhook.yaml, docs/deploy.md). There is no session or token:
the API server is the caller, and the answer is a pure function of the review it sent,
revealing nothing and writing nothing.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from queueing.cluster.kubernetes.webhook import ReviewError, review


@csrf_exempt
@require_POST
def mutate(request: HttpRequest) -> JsonResponse:
    try:
        body = json.loads(request.body)
    except ValueError:
        return JsonResponse({"error": "The body is not JSON."}, status=400)
    try:
        answer = review(
            body,
            namespaces=settings.KQ_NAMESPACES,
            kinds=settings.KQ_KINDS,
            now=timezone.now(),
        )
    except ReviewError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse(answer)

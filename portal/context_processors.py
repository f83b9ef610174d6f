from typing import Any

from django.http import HttpRequest


def navigation(request: HttpRequest) -> dict[str, Any]:
    """Expose the running mode to every template (shown in the page footer)."""
    from django.conf import settings

    return {"kq_cluster_mode": settings.KQ_CLUSTER}

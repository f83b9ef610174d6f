"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

from django.core.exceptions import ImproperlyConfigured

try:
    from django.core.asgi import get_asgi_application

    django_asgi_app = get_asgi_application()
except ImproperlyConfigured as exc:
    print(f"Koord-Queue cannot start: {exc}", file=sys.stderr)
    sys.exit(2)

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator

from portal.routing import websocket_urlpatterns
from portal.ws_auth import TokenAuthMiddleware

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns)))
        ),
    }
)

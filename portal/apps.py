from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The web layer: pages, forms, REST API and WebSocket consumers."""

    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

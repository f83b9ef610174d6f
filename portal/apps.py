from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The web layer: pages, forms, REST API and WebSocket consumers."""

    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from portal import security  # noqa: F401  # connects the lockout audit receiver

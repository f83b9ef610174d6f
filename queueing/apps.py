from django.apps import AppConfig


class QueueingConfig(AppConfig):
    """The domain: tenants, quotas, queues, workloads and the admission cycle."""

    name = "queueing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from queueing import wake

        wake.connect_signals()  # quota and queue edits wake their trees' cycles

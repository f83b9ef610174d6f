from django.apps import AppConfig


class QueueingConfig(AppConfig):
    """The domain: tenants, quotas, queues, workloads and the admission cycle."""

    name = "queueing"
    default_auto_field = "django.db.models.BigAutoField"

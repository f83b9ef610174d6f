"""The REST API for automation (``/api/v1/``): serializers, viewsets, auth and errors."""

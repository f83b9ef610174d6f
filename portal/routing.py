from django.urls import path

from portal import consumers

websocket_urlpatterns = [
    path("ws/tenants/<int:tenant_id>/", consumers.TenantConsumer.as_asgi()),
    path("ws/all/", consumers.ClusterConsumer.as_asgi()),
]

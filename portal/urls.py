from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from portal.views import metrics, pages

urlpatterns = [
    path("", pages.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tenants/<slug:name>/", pages.tenant_page, name="tenant"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
]

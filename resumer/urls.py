from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from runs.api import token_views
from runs.api.api import api, api_not_found
from runs.dashboard import queue_admin
from runs.dashboard.urls import pipeline_urlpatterns, worker_urlpatterns
from runs.observability import views as observability

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="runs:inbox", permanent=False)),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/rq/", include(queue_admin.urls)),
    path("admin/", admin.site.urls),
    path("runs/", include("runs.dashboard.urls")),
    path("pipelines/", include((pipeline_urlpatterns, "pipelines"))),
    path("workers/", include((worker_urlpatterns, "workers"))),
    # The JSON API (runs/api/, docs/api.md) and the page where people make their tokens.
    path("api/v1/", api.urls),
    # Any other address under it is the API's too: a 404 problem, not the HTML page.
    re_path(r"^api/", api_not_found),
    path("account/tokens/", include(token_views)),
    # Prometheus (docs/monitoring.md): a bearer token, or local clients only.
    path("metrics", observability.metrics, name="metrics"),
    # A load balancer's probe (docs/monitoring.md): 200, or 503 naming what did not answer.
    path("healthz", observability.healthz, name="healthz"),
]

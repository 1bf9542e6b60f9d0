from django.urls import path

from demo_service import views

urlpatterns = [
    path("v1/renders", views.renders),
    path("v1/renders/by-key/<str:key>", views.render_by_key),
    path("v1/assets", views.assets),
    path("v1/assets/by-key/<str:key>", views.asset_by_key),
    path("v1/articles", views.articles),
    path("v1/articles/by-key/<str:key>", views.article_by_key),
    path("v1/articles/<str:article_id>", views.article),
    path("v1/chat/completions", views.chat_completions),
    path("v1/charges", views.charges),
    path("v1/charges/by-key/<str:key>", views.charge_by_key),
    path("_health", views.health),
    path("_faults", views.fault_list),
    path("_limits", views.limits),
    path("_meter", views.meter),
    path("_marks", views.marks),
    path("_reset", views.reset),
    path("_state", views.state),
]

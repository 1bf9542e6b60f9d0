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
    path("v1/scripts", views.scripts_view),
    path("v1/scripts/<str:name>", views.script),
    path("v1/calendar", views.calendar),
    path("v1/meetings", views.meetings),
    path("v1/meetings/by-key/<str:key>", views.meeting_by_key),
    path("v1/mail", views.mail),
    path("v1/mail/by-key/<str:key>", views.mail_by_key),
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

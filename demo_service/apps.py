from django.apps import AppConfig


class DemoServiceConfig(AppConfig):
    name = "demo_service"
    verbose_name = "Demo outside world (HTTP service)"
    default_auto_field = "django.db.models.BigAutoField"

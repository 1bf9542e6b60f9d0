"""Dashboard URLs. A run is addressed by its public id (/runs/run-42/); anything else that
looks like an id (/runs/run-abc/, a 30-digit number) matches nothing and is a plain 404."""

from __future__ import annotations

from django.urls import path, register_converter
from django.urls.converters import StringConverter

from runs import ids
from runs.dashboard import (
    decision_views,
    gate_views,
    inbox_views,
    pipeline_views,
    start_views,
    views,
    worker_views,
)
from runs.models import Run


class RunIdConverter:
    # At most 18 digits: always inside a 64-bit primary key, so a huge number is a 404,
    # never a database overflow error.
    regex = ids.URL_REGEX

    def to_python(self, value: str) -> int:
        return int(value.removeprefix(ids.PREFIX))

    def to_url(self, value: int | Run) -> str:
        pk = value.pk if isinstance(value, Run) else int(value)
        return ids.run_id(pk)


class IdConverter:
    regex = ids.DIGITS

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(int(value))


class PipelineNameConverter(StringConverter):
    # A registered pipeline's name; anything else is a 404 from the view.
    regex = r"[A-Za-z0-9_.-]{1,64}"


class FingerprintConverter(StringConverter):
    # A group fingerprint (runs/planning/grouping.py): anything else is a plain 404.
    regex = r"[0-9a-f]{64}"


class BatchIdConverter(FingerprintConverter):
    # A group approval's batch id (a uuid4's hex).
    regex = r"[0-9a-f]{32}"


register_converter(RunIdConverter, "run")
register_converter(BatchIdConverter, "batch")
register_converter(FingerprintConverter, "fingerprint")
register_converter(IdConverter, "id")
register_converter(PipelineNameConverter, "pipeline")

app_name = "runs"

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("news/", inbox_views.inbox_news, name="inbox_news"),
    path("<run:pk>/", views.run_detail, name="run"),
    path("<run:pk>/timeline/", views.run_timeline, name="timeline"),
    path("<run:pk>/plan/", views.plan, name="plan"),
    path("<run:pk>/plan/check/", views.check_targets, name="check_targets"),
    path("<run:pk>/approve/", views.approve_plan, name="approve"),
    path("<run:pk>/acknowledge/", decision_views.acknowledge_deviation, name="acknowledge"),
    path("<run:pk>/ask-again/", decision_views.ask_again_view, name="ask_again"),
    path("<run:pk>/close/", decision_views.close_run, name="close"),
    path("<run:run_pk>/effects/<id:pk>/", decision_views.effect_detail, name="effect"),
    path("<run:run_pk>/effects/<id:pk>/ask/", decision_views.effect_ask, name="effect_ask"),
    path(
        "<run:run_pk>/effects/<id:pk>/record/", decision_views.effect_record, name="effect_record"
    ),
    path(
        "<run:run_pk>/effects/<id:pk>/ask-supervisor/",
        decision_views.effect_ask_supervisor,
        name="effect_ask_supervisor",
    ),
    path("<run:run_pk>/gates/<id:pk>/", gate_views.gate_detail, name="gate"),
    path("<run:run_pk>/gates/<id:pk>/preview/", gate_views.gate_preview, name="gate_preview"),
    path("<run:run_pk>/gates/<id:pk>/answer/", gate_views.gate_answer, name="gate_answer"),
    # Identical gates across runs (runs/gates/decision.py shape: a sha256, like a fingerprint).
    path("gate-groups/<fingerprint:shape>/", gate_views.gate_group, name="gate_group"),
    path(
        "gate-groups/<fingerprint:shape>/answer/",
        gate_views.gate_group_answer,
        name="gate_group_answer",
    ),
    path("groups/<fingerprint:fingerprint>/", views.group_detail, name="group"),
    path("groups/<fingerprint:fingerprint>/approve/", views.approve_group, name="approve_group"),
    path("batches/<batch:batch_id>/", views.batch_detail, name="batch"),
    path("artifacts/<id:pk>/", views.artifact_detail, name="artifact"),
    path("artifacts/<id:pk>/raw/", views.artifact_raw, name="artifact_raw"),
]

# Mounted at /pipelines/ by resumer/urls.py, as the "pipelines" namespace.
pipeline_urlpatterns = [
    path("", pipeline_views.pipeline_index, name="index"),
    path("<pipeline:name>/", views.pipeline_detail, name="detail"),
    path("<pipeline:name>/start/", start_views.start_form, name="start"),
    path("<pipeline:name>/runs/", start_views.start, name="start_run"),
]

# Mounted at /workers/ by resumer/urls.py, as the "workers" namespace.
worker_urlpatterns = [
    path("", worker_views.worker_list, name="list"),
]

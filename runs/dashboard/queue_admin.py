"""django-rq's queue pages (/admin/rq/), for supervisors only.

django-rq lets any staff user in; a staff user whose supervisor group was taken away must not
read job arguments or delete jobs, so every one of its views (the stats JSON included) is
wrapped here: staff first (django-rq's own answer: the admin's login page), then the
supervisor role (403, as the dashboard answers). Its views also index a Python list with the
queue number and fetch jobs and workers unchecked, so an id that names nothing would be a 500;
the wrapper answers 404 before the view runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern
from django_rq.queues import get_queue_by_index
from django_rq.settings import get_queues_list
from django_rq.urls import get_admin_urlpatterns, get_api_urlpatterns
from redis import Redis
from rq.job import Job
from rq.worker import Worker

from runs.access import roles

View = Callable[..., HttpResponse]


def _known_queue(index: int) -> Redis:
    """The queue's Redis connection; 404 for a number past the configured queues."""
    if not 0 <= index < len(get_queues_list()):
        raise Http404(f"There is no queue {index}.")
    return get_queue_by_index(index).connection


def _require_known(request: HttpRequest, kwargs: dict) -> None:
    """404 unless every queue, scheduler, job and worker the request names exists."""
    if "scheduler_index" in kwargs:
        # The scheduler pages need rq-scheduler, which Resumer does not use.
        raise Http404("There is no scheduler (rq-scheduler is not installed).")
    if "queue_index" not in kwargs:
        return
    connection = _known_queue(kwargs["queue_index"])
    job_ids = [kwargs["job_id"]] if "job_id" in kwargs else []
    if request.method == "POST":
        job_ids += request.POST.getlist("job_ids")  # the bulk actions
    for job_id in job_ids:
        if not Job.exists(job_id, connection=connection):
            raise Http404(f"There is no job {job_id}.")
    key = kwargs.get("key")
    if key is not None and not (
        key.startswith(Worker.redis_worker_namespace_prefix) and connection.exists(key)
    ):
        raise Http404(f"There is no worker {key}.")


def supervisor_only(view: View) -> View:
    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not roles.can_manage_queues(request.user):
            raise PermissionDenied("Only a supervisor may look at or change the queues.")
        _require_known(request, kwargs)
        return view(request, *args, **kwargs)

    return staff_member_required(wrapped)


def _wrapped(patterns: list[URLPattern]) -> list[URLPattern]:
    for pattern in patterns:
        pattern.callback = supervisor_only(pattern.callback)
    return patterns


# Mounted under the "django_rq" namespace, which django-rq's templates reverse.
urlpatterns = _wrapped(get_api_urlpatterns()) + get_admin_urlpatterns(view_wrapper=supervisor_only)
urls = (urlpatterns, "django_rq")

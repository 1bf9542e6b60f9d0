"""The operator sees inside a failure (issue 47, item 6): a failed stage's traceback and log
lines on the run page, for operators and up; the workers page, listing a real worker beside
the lease it holds, for operators and up.

The failed run is executed in this process (tests/support/failing.py); the workers page's
worker is a real `rqworker` process.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from demo.management.commands.seed_demo import interrupt_killed, run_until_killed
from runs import enqueue
from runs.execution import stage_log
from runs.ledger import leases
from runs.models import Lease, Run
from tests.support import failing
from tests.support.pipelines import registered
from tests.support.processes import free_port, wait_for
from tests.support.state import wait_settled
from tests.support.web import client_as

WORKER_PIPELINES = f"demo.pipeline.content_pipeline,{failing.PATH}"
# What only the stage log holds: a frame of the traceback and a line the stage logged. (The
# FAILED event in the timeline, which every role reads, says the exception's message.)
TRACEBACK_FRAME = "in reconcile_totals"
LOGGED = "checking invoice 1 &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"


@pytest.fixture(autouse=True)
def pipeline(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with registered(settings, failing.PATH):
        yield


def run_page(role: str, run: Run) -> str:
    response = client_as(role).get(reverse("runs:run", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_an_operator_reads_a_failed_stages_traceback_and_lines_escaped(transactional_db):
    run = failing.failed_run("raise")

    html = run_page("operator", run)
    section = html[html.index('id="stage-logs"') :]
    assert TRACEBACK_FRAME in section
    assert "ValueError: ledger total 12 != 13 &lt;b&gt;not bold&lt;/b&gt;" in section
    assert LOGGED in section
    assert "<script>alert(" not in html


def test_a_viewer_is_not_shown_what_a_failed_stage_logged(transactional_db):
    run = failing.failed_run("raise")

    html = run_page("viewer", run)
    assert run.status == Run.Status.FAILED
    assert 'id="stage-logs"' not in html
    assert TRACEBACK_FRAME not in html
    assert "checking invoice 1" not in html


def test_an_interrupted_run_shows_the_lines_its_killed_worker_flushed(
    transactional_db, monkeypatch
):
    # The forked worker inherits the short flush interval (tests/support/failing.py "killed").
    monkeypatch.setattr(stage_log, "FLUSH_SECONDS", 0.05)
    run = failing.start("killed")
    run = interrupt_killed(run, run_until_killed(run.pk), "by the test")

    html = run_page("operator", run)
    assert run.status == Run.Status.INTERRUPTED
    section = html[html.index('id="stage-logs"') :]
    assert "only the lines it flushed before" in section
    assert "worker stopped mid-stage" in section
    assert "the last words before the kill" in section


def test_a_viewer_is_refused_the_workers_page(db):
    response = client_as("viewer").get(reverse("workers:list"))
    assert response.status_code == 403


def test_the_workers_page_says_redis_is_away_and_still_lists_the_leases(db, settings):
    # django-rq reads RQ_QUEUES at call time: the queue now points where nothing listens.
    settings.RQ_QUEUES = {
        name: {**config, "URL": f"redis://127.0.0.1:{free_port()}/0"}
        for name, config in settings.RQ_QUEUES.items()
    }
    run = failing.start("hold")
    leases.acquire(run.pk, "worker:elsewhere:42")

    response = client_as("operator").get(reverse("workers:list"))

    assert response.status_code == 200
    page = response.context["page"]
    assert page.redis_error and page.workers == []
    assert {h: [lease.run_id for lease in held] for h, held in page.unmatched.items()} == {
        "worker:elsewhere:42": [run.pk]
    }


def test_the_workers_page_lists_a_live_worker_beside_the_lease_it_holds(workers, tmp_path):
    release = tmp_path / "release"
    run = failing.start("hold", enqueue=True)
    proc = workers.start(
        env={"RESUMER_PIPELINES": WORKER_PIPELINES, failing.RELEASE_ENV: str(release)}
    )
    holder = wait_for(
        lambda: (
            Lease.objects.filter(run=run, holder__startswith="worker:")
            .values_list("holder", flat=True)
            .first()
        ),
        what="the worker to take the run's lease",
    )

    response = client_as("operator").get(reverse("workers:list"))
    release.touch()

    assert response.status_code == 200
    page = response.context["page"]
    listed = {w.pid: w for w in page.workers}
    worker = listed[proc.pid]
    assert worker.holder == holder
    assert (worker.state, worker.current_job) == ("busy", enqueue.job_id(run.pk, run.ticket))
    assert [(lease.run_id, lease.expired) for lease in worker.leases] == [(run.pk, False)]
    assert page.unmatched == {}
    row = re.search(rf'<th scope="row"><code>{worker.name}</code>.*?</tr>', html(response), re.S)
    assert row and f'href="/runs/{run.public_id}/"' in row.group(0)
    assert wait_settled(run) == Run.Status.SUCCEEDED


def html(response) -> str:
    return response.content.decode()


def test_a_worker_killed_mid_job_is_listed_as_gone_not_busy(workers, tmp_path):
    release = tmp_path / "release"
    run = failing.start("hold", enqueue=True)
    proc = workers.start(
        env={"RESUMER_PIPELINES": WORKER_PIPELINES, failing.RELEASE_ENV: str(release)}
    )
    wait_for(
        lambda: Lease.objects.filter(run=run, holder__startswith="worker:").exists(),
        what="the worker to take the run's lease",
    )

    proc.kill()  # SIGKILL: it says nothing to RQ, whose registry keeps it as busy
    proc.wait(timeout=30)
    response = client_as("operator").get(reverse("workers:list"))
    release.touch()

    worker = {w.pid: w for w in response.context["page"].workers}[proc.pid]
    assert worker.state == "busy" and worker.gone
    row = re.search(rf'<th scope="row"><code>{worker.name}</code>.*?</tr>', html(response), re.S)
    assert row and "gone</span>: its process is not running on this host" in row.group(0)

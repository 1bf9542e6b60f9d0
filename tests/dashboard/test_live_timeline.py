"""The run page's live poll (issue 48, item 5): the page's poll form says what the page shows,
and a poll gets only what moved since: the events after the page's last seq, nothing (204)
when nothing moved, the whole timeline again when the page must be laid out again.

Runs are started here and their events appended through the append path, as a worker would;
no worker runs."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from demo import faults
from runs.execution import sweeper
from runs.ledger import leases
from runs.ledger.append import Writer, append
from runs.models import Run
from tests.support import events
from tests.support.web import client_as, form_values

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RESUMER_LEASE_TTL = 120


@pytest.fixture
def viewer() -> Client:
    return client_as("viewer")


def url(run: Run, suffix: str = "") -> str:
    return f"/runs/{run.public_id}/{suffix}"


def moving() -> tuple[Run, Writer]:
    """A run a worker moves: its lease taken, its research stage started, one call made."""
    run = faults.start_run("content", {}, actor="test", faults={}, enqueue=False)
    writer = Writer(run.pk, leases.acquire(run.pk, "worker:test", takeover=True), "worker:test")
    append(writer, events.started("research"))
    append(writer, events.called(1))
    return Run.objects.get(pk=run.pk), writer


def poll_form(client: Client, run: Run) -> dict[str, str]:
    return form_values(client.get(url(run)).content.decode(), url(run, "timeline/"))


def poll(client: Client, run: Run, form: dict[str, str]):
    return client.get(url(run, "timeline/"), form, headers={"HX-Request": "true"})


def seqs(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<th scope="row" class="num">(\d+)</th>', html)]


def test_a_poll_after_the_last_seq_gets_only_the_new_events(viewer, facts):
    run, writer = moving()
    form = poll_form(viewer, run)
    assert form["since"] == str(run.last_seq)
    append(writer, events.result(1))
    append(writer, events.called(2))

    html = poll(viewer, run, form).content.decode()
    assert seqs(html) == [run.last_seq + 1, run.last_seq + 2]
    # Of the stage the page's last table shows: under that table, which starts at STARTED.
    started = run.last_seq - 1
    assert form["tail"] == str(started)
    assert f'<tbody hx-swap-oob="beforeend:#events-{started}">' in html
    assert "<h3" not in html.split('id="run-header"')[0]  # no table of their own
    # The next poll asks after them.
    assert form_values(html, url(run, "timeline/"))["since"] == str(run.last_seq + 2)


def test_a_poll_when_nothing_moved_gets_nothing(viewer, facts):
    run, _ = moving()
    response = poll(viewer, run, poll_form(viewer, run))
    assert response.status_code == 204
    assert response.content == b""


def test_new_events_of_another_stage_start_a_table_of_their_own(viewer, facts):
    run, writer = moving()
    form = poll_form(viewer, run)
    append(writer, events.started("draft"))

    html = poll(viewer, run, form).content.decode()
    assert seqs(html) == [run.last_seq + 1]
    assert '<div hx-swap-oob="beforeend:#timeline-events">' in html
    assert "Stage draft" in html and "Stage research" not in html
    assert f'id="events-{run.last_seq + 1}"' in html
    assert form_values(html, url(run, "timeline/"))["tail"] == str(run.last_seq + 1)


def test_a_run_that_stopped_gets_its_whole_timeline_again(viewer, facts):
    run, writer = moving()
    form = poll_form(viewer, run)
    leases.release(run.pk, writer.token)
    sweeper.interrupt(sweeper.Finding(run.pk, "test: gone", {}), takeover=True)

    response = poll(viewer, run, form)
    html = response.content.decode()
    # Its live line and its pace change: the page's timeline is drawn again, in its place.
    assert response["HX-Retarget"] == "#timeline"
    assert seqs(html) == list(range(1, Run.objects.get(pk=run.pk).last_seq + 1))
    assert "this page follows the run until it is done" in html


@pytest.mark.parametrize("field", ["since", "beat", "follows"])
def test_a_garbled_poll_gets_the_whole_timeline(viewer, facts, field):
    run, _ = moving()
    form = {**poll_form(viewer, run), field: "x"}
    response = poll(viewer, run, form)
    assert response.status_code == 200
    assert seqs(response.content.decode()) == list(range(1, run.last_seq + 1))

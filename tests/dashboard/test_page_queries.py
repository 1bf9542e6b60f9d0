"""How many queries each page makes, as docs/benchmarks.md states them, pinned: a change that
adds one says so there too. An operator is signed in: a session, its user and its role's
groups are three of them (a superuser's role needs no groups: one fewer). The counts do not
grow with runs or events (test_views.py); they differ with what a run's page has to show."""

from __future__ import annotations

import pytest
from django.test import Client

from demo import faults
from tests.support.plans import stopped_with_plan
from tests.support.web import client_as, form_values

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RESUMER_LEASE_TTL = 120


@pytest.fixture
def operator() -> Client:
    return client_as("operator")


@pytest.fixture
def world(facts) -> dict:
    """A run that succeeded, one stopped with its plan stored, one a worker is about to move."""
    return {
        "succeeded": stopped_with_plan(),
        "stopped": stopped_with_plan({"timeout": "visual/render-cover/after"}),
        "moving": faults.start_run("content", {}, actor="test", faults={}, enqueue=False),
    }


def test_the_inbox_makes_ten_queries(operator, world, django_assert_num_queries):
    # The runs with their stored plans, their stopping events, the counts by reason, the
    # groups of identical plans and a sample plan of each, the runs without a plan, the
    # gates waiting for a human.
    with django_assert_num_queries(10):
        assert operator.get("/runs/").status_code == 200


@pytest.mark.parametrize(
    ("which", "count"),
    # Moving: the run, checkpoints, effects, events, branches, stage logs, conversations,
    # model spend. Succeeded: also the artifacts, the confirmations its effects were made
    # with, and one read per stage that talked to a model (its conversation). Stopped: also
    # its stored plan and the newest stop that plan must answer.
    [("moving", 11), ("succeeded", 15), ("stopped", 17)],
)
def test_the_run_page_makes_a_fixed_number_of_queries(
    operator, world, django_assert_num_queries, which, count
):
    with django_assert_num_queries(count):
        assert operator.get(f"/runs/{world[which].public_id}/").status_code == 200


def test_the_pipeline_page_makes_eight_queries(operator, world, django_assert_num_queries):
    # Attempts, spend, what skipped stages saved, what reuses saved (and what gates
    # replayed), and the window, whatever the window holds.
    with django_assert_num_queries(8):
        assert operator.get("/pipelines/content/?runs=500").status_code == 200


def test_a_live_poll_when_nothing_moved_makes_four_queries(
    operator, world, django_assert_num_queries
):
    run = world["moving"]
    timeline = f"/runs/{run.public_id}/timeline/"
    form = form_values(operator.get(f"/runs/{run.public_id}/").content.decode(), timeline)
    # The run with its lease and its stored plan's time: nothing else.
    with django_assert_num_queries(4):
        assert operator.get(timeline, form).status_code == 204

"""Issue 24's leftovers: every batch has a page showing what became of each run, group pages
link their runs and name each call's policy, form errors beside the button, times with their
zone, /pipelines/ in the navigation, and the product's own 404 and 500 pages, also under the
settings `make run` gives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.urls import path

from demo.management.commands.seed_demo import run_inline
from runs.models import Event, GroupApproval, Run, StoredPlan
from tests.support.plans import interrupted_with_plan, stopped_with_plan
from tests.support.web import client_as

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RESUMER_LEASE_TTL = 120


def group_of(run: Run) -> str:
    return StoredPlan.objects.values_list("shape", flat=True).get(run=run)


def approve(group: str, runs: list[Run], **changes: str):
    data = {
        "action": "strict",
        "fingerprint": group,
        "confirm": "on",
        "scope": "all",
        "shown": ",".join(r.public_id for r in runs),
        **changes,
    }
    return client_as("operator").post(f"/runs/groups/{group}/approve/", data)


# --- batches ---------------------------------------------------------------------------------


def test_an_approval_made_in_the_request_has_a_batch_page_with_each_runs_outcome(facts):
    runs = [interrupted_with_plan() for _ in range(2)]
    response = approve(group_of(runs[0]), runs)
    assert response.status_code == 200
    batch = Event.objects.get(run=runs[0], type=Event.Type.PLAN_APPROVED).payload["batch"]
    row = GroupApproval.objects.get(pk=batch)
    assert (row.state, row.total, row.done) == (GroupApproval.State.DONE, 2, 2)
    assert f'href="/runs/batches/{batch}/"' in response.content.decode()

    page = client_as("viewer").get(f"/runs/batches/{batch}/").content.decode()
    assert "Approved 2, skipped 0" in page
    for run in runs:
        assert f'href="/runs/{run.public_id}/"' in page
    # What each run is doing, beside its badge: waiting for a worker (none runs here).
    assert page.count("waiting for a worker to run research") == 2
    assert 'hx-trigger="every 2s"' in page  # it follows the runs while they move

    run_inline(runs[0].pk)
    page = client_as("viewer").get(f"/runs/batches/{batch}/").content.decode()
    done = '<span class="badge status-succeeded">Succeeded</span> </td>'
    assert done in page and "waiting for a worker to run research" in page
    run_inline(runs[1].pk)
    page = client_as("viewer").get(f"/runs/batches/{batch}/").content.decode()
    assert page.count(done) == 2 and "finished" not in page
    assert "hx-trigger" not in page.split('id="batch"')[1].split(">")[0]


def test_a_batch_that_approved_nothing_has_a_page_too(facts):
    run = interrupted_with_plan()
    group = group_of(run)
    assert approve(group, [run]).status_code == 200
    again = interrupted_with_plan()
    response = approve(group_of(again), [run])  # run left the group: skipped
    assert response.status_code == 409
    row = GroupApproval.objects.order_by("-created_at").first()
    page = client_as("viewer").get(f"/runs/batches/{row.pk}/").content.decode()
    assert "Approved 0, skipped 1" in page


# --- group pages -----------------------------------------------------------------------------


def test_a_group_page_links_its_runs_and_names_each_calls_policy(facts):
    runs = [stopped_with_plan({"timeout": "publish/promote-charge/after"}) for _ in range(2)]
    html = client_as("viewer").get(f"/runs/groups/{group_of(runs[0])}/").content.decode()
    for run in runs:
        assert f'<a href="/runs/{run.public_id}/">{run.public_id}</a>' in html
    calls = html.split('class="effects-plan"')[1].split("</table>")[0]
    assert "<code>NEVER</code>" in calls  # the charge
    assert "Never: a human decides" in calls
    assert re.search(r"<code>(SAFE|IDEMPOTENT|RECONCILE_FIRST)</code>", calls)


def form_part(html: str) -> str:
    return html.split('class="approve approve-group"')[1].split("</form>")[0]


def test_an_unticked_confirmation_is_said_beside_the_button(facts):
    run = interrupted_with_plan()
    group = group_of(run)
    html = client_as("operator").get(f"/runs/groups/{group}/").content.decode()
    assert f'action="/runs/groups/{group}/approve/#approve-errors"' in html

    response = approve(group, [run], confirm="")
    assert response.status_code == 400
    form = form_part(response.content.decode())
    message = "Tick “I have read the group&#x27;s plan” to confirm."
    assert message in form
    # Inside the form, after the box and before the button, where the page lands.
    assert form.index('id="confirm-group"') < form.index(message) < form.index('type="submit"')
    assert form.index('id="approve-errors"') < form.index(message)


def test_a_malformed_fingerprint_gets_a_message_that_says_what_it_is(facts):
    run = interrupted_with_plan()
    group = group_of(run)
    response = approve(group, [run], fingerprint="not-a-fingerprint")
    assert response.status_code == 400
    html = response.content.decode()
    assert "This is not a group&#x27;s fingerprint (64 hexadecimal characters)" in form_part(html)
    assert "Enter a valid value." not in html


# --- times, navigation, pipelines ------------------------------------------------------------


def test_times_are_shown_in_the_configured_zone_and_name_it(facts, settings):
    settings.TIME_ZONE = "Europe/Paris"
    run = interrupted_with_plan()
    html = client_as("viewer").get("/runs/").content.decode()
    assert "times in Europe/Paris" in html
    row = html.split(f">{run.public_id}</a></th>")[1].split("</tr>")[0]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T</time>", row), row


def test_the_navigation_leads_to_the_pipelines_and_the_api_tokens(db):
    html = client_as("viewer").get("/runs/").content.decode()
    nav = html.split('aria-label="Main"')[1].split("</nav>")[0]
    assert 'href="/pipelines/"' in nav and 'href="/account/tokens/"' in nav


def test_the_pipelines_index_lists_each_registered_pipeline_and_flags_unknown_ones(facts):
    interrupted_with_plan()
    gone = interrupted_with_plan()
    Run.objects.filter(pk=gone.pk).update(pipeline="retired")
    response = client_as("viewer").get("/pipelines/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<a href="/pipelines/content/">content</a>' in html
    assert "research →" in html
    assert "Runs of pipelines this server does not load" in html
    assert "<code>retired</code>: 1 run, 1 needing a human" in html
    assert Client().get("/pipelines/").status_code == 302  # login first


# --- the product's own error pages -----------------------------------------------------------


def boom(request):
    raise RuntimeError("a bug")


urlpatterns = [path("boom/", boom)]


def test_404_and_500_are_the_products_own_with_debug_off(db, settings):
    settings.DEBUG = False
    viewer = client_as("viewer")
    missing = viewer.get("/runs/run-abc/")
    assert missing.status_code == 404
    html = missing.content.decode()
    assert "<h1>Not found</h1>" in html and "Back to the runs" in html
    # A view's own reason is what the page says, not the generic "nothing at".
    assert "There is no run-abc" not in html
    gone = viewer.get("/runs/run-999999/").content.decode()
    assert "There is no run-999999." in gone and "nothing at" not in gone
    unknown = viewer.get("/no-such-page/").content.decode()
    assert "There is nothing at <code>/no-such-page/</code>" in unknown
    assert "URLconf" not in html and "urlpatterns" not in html

    settings.ROOT_URLCONF = __name__
    broken = Client(raise_request_exception=False).get("/boom/")
    assert broken.status_code == 500
    assert "<h1>Server error</h1>" in broken.content.decode()
    assert "Traceback" not in broken.content.decode()


def test_make_run_serves_the_products_404_and_public_urls_follow_port(tmp_path):
    recipe = subprocess.run(
        ["make", "-n", "run", "PORT=8123", f"VAR={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 'export DEBUG="${DEBUG:-0}"' in recipe
    assert 'export RESUMER_PUBLIC_URL="${RESUMER_PUBLIC_URL:-http://127.0.0.1:8123}"' in recipe
    # The settings the web process gets from that environment give the product's 404.
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    env.update(DEBUG="0", RESUMER_PUBLIC_URL="http://127.0.0.1:8123")
    check = (
        "import django; django.setup(); from django.conf import settings; "
        "from django.test import Client; from django.test.utils import setup_test_environment; "
        "setup_test_environment(); r = Client().get('/no-such-page/'); "
        "print(settings.DEBUG, settings.RESUMER_PUBLIC_URL, r.status_code, "
        "'URLconf' in r.content.decode(), 'Not found' in r.content.decode())"
    )
    out = subprocess.run(
        [sys.executable, "-c", check],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "resumer.settings"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["False", "http://127.0.0.1:8123", "404", "False", "True"]

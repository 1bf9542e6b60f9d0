"""Typed inputs (runs/inputs.py): JSON checked against a pipeline's pydantic model when a run
starts, on every face (the command line, the API, the dashboard's start form). A bad one is
refused with a message naming it, and nothing is written; a good one is pinned as the model
dumps it, handed to the stage as JSON, and shown as JSON on the run page and the gate page."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from demo.management.commands.seed_demo import run_inline
from runs.execution import engine
from runs.models import Checkpoint, Event, Gate, Run
from tests.support import typed_pipeline
from tests.support.pipelines import registered
from tests.support.web import api_as, client_as

BAD_EMAILS = [
    pytest.param('{"subject": "no sender"}', "sender", id="a-missing-field"),
    pytest.param('{"sender": "ana@example.com", "subject": ', "must be JSON", id="not-json"),
    pytest.param('["a", "list"]', "Email", id="a-list-for-an-object"),
]


@pytest.fixture
def mailer(db, settings):
    with registered(settings, typed_pipeline.PATH):
        yield


def nothing_written() -> bool:
    return not Run.objects.exists() and not Event.objects.exists()


def start_command(*args: str) -> str:
    out = StringIO()
    call_command("start_run", "mailer", *args, "--no-enqueue", stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(("email", "said"), BAD_EMAILS)
def test_the_command_refuses_a_bad_typed_input_naming_it_and_writes_nothing(mailer, email, said):
    with pytest.raises(CommandError) as refused:
        start_command("--input", f"email={email}")

    assert "input email" in str(refused.value) and said in str(refused.value)
    assert nothing_written()


def test_a_typed_input_without_a_default_is_required(mailer):
    with pytest.raises(CommandError, match="input email is required: the email to answer"):
        start_command()
    assert nothing_written()


def test_the_command_pins_a_typed_input_as_its_model_dumps_it(mailer):
    email = {"sender": "ana@example.com", "subject": "Lunch?"}
    out = start_command("--input", f"email={json.dumps(email)}", "--input", 'labels=["home"]')

    run = Run.objects.get()
    assert run.inputs == {"email": email | {"body": ""}, "labels": ["home"], "tone": "plain"}
    assert json.dumps(run.inputs["email"]) in out
    created = Event.objects.get(run=run, type=Event.Type.RUN_CREATED)
    assert created.inputs["email"] == run.inputs["email"]


def test_the_commands_help_says_which_inputs_are_typed_json(mailer, capsys):
    with pytest.raises(SystemExit):
        call_command("start_run", "--help")
    help_text = capsys.readouterr().out
    assert "email=<required, JSON: Email>" in help_text
    assert 'labels=["inbox"]' in help_text


@pytest.mark.parametrize(("email", "said"), BAD_EMAILS)
def test_the_api_answers_a_bad_typed_input_with_a_422_naming_it(mailer, email, said):
    try:
        given = json.loads(email)
    except ValueError:
        given = email  # a typed input's text is taken too, and must then be JSON
    response = api_as("operator").post(
        "/api/v1/runs",
        json.dumps({"pipeline": "mailer", "inputs": {"email": given}}),
        content_type="application/json",
    )

    assert response.status_code == 422
    problem = response.json()
    assert problem["input"] == "email" and said in problem["detail"]
    assert nothing_written()


def test_the_api_takes_a_typed_input_as_json(mailer, redis_conn):
    response = api_as("operator").post(
        "/api/v1/runs",
        json.dumps({"pipeline": "mailer", "inputs": {"email": typed_pipeline.EMAIL}}),
        content_type="application/json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["inputs"]["email"] == typed_pipeline.EMAIL
    assert Run.objects.get().inputs["email"] == typed_pipeline.EMAIL


@pytest.mark.parametrize(("email", "said"), BAD_EMAILS)
def test_the_start_form_shows_a_bad_typed_input_as_its_fields_error(mailer, email, said):
    response = client_as("operator").post("/pipelines/mailer/runs/", {"email": email})

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["email"] and said in errors["email"][0]
    assert nothing_written()


def test_the_start_page_shows_a_refused_input_beside_its_field(mailer):
    response = client_as("operator").post("/pipelines/mailer/runs/", {"email": "not json"})

    html = response.content.decode()
    beside = html[html.index('id="id_email"') :].split("</div>")[0]
    assert 'id="id_email_error"' in beside and "must be JSON" in beside
    assert nothing_written()


def test_the_start_form_starts_a_run_and_goes_to_its_page(mailer, redis_conn):
    operator = client_as("operator")
    form = operator.get("/pipelines/mailer/start/")
    assert form.status_code == 200 and "Its schema" in form.content.decode()

    response = operator.post("/pipelines/mailer/runs/", {"email": json.dumps(typed_pipeline.EMAIL)})

    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse(
        "runs:run", args=[run.pk]
    )
    assert run.inputs["email"] == typed_pipeline.EMAIL
    assert Event.objects.get(run=run).actor == "user:operator"


def test_a_viewer_may_not_start_a_run(mailer):
    viewer = client_as("viewer")
    assert viewer.get("/pipelines/mailer/start/").status_code == 403
    response = viewer.post("/pipelines/mailer/runs/", {"email": json.dumps(typed_pipeline.EMAIL)})
    assert response.status_code == 403
    assert nothing_written()


@pytest.fixture
def waiting_mail(mailer, transactional_db) -> Run:
    run = engine.start_run("mailer", {"email": typed_pipeline.EMAIL}, actor="test", enqueue=False)
    return run_inline(run.pk)


def test_the_stage_reads_the_typed_input_as_json(waiting_mail, settings):
    gate = Gate.objects.get(run=waiting_mail)
    assert gate.question == "Send a reply to ana@example.com?"
    started = Event.objects.get(run=waiting_mail, type=Event.Type.STARTED)
    assert started.inputs["email"] == typed_pipeline.EMAIL
    assert not Checkpoint.objects.filter(run=waiting_mail).exists()


def test_the_run_page_and_the_gate_page_show_a_typed_input_as_json(waiting_mail):
    viewer = client_as("viewer")
    gate = Gate.objects.get(run=waiting_mail)
    shown = json.dumps(typed_pipeline.EMAIL, indent=2, sort_keys=True)
    # Escaped once, as any text a page shows: JSON, never Python's repr of a dict.
    escaped = shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = escaped.replace('"', "&quot;")
    pages = (
        reverse("runs:run", args=[gate.run_id]),
        reverse("runs:gate", args=[gate.run_id, gate.pk]),
    )
    for path in pages:
        html = viewer.get(path).content.decode()
        assert f'<pre class="json">{escaped}</pre>' in html, path
        assert "{&#x27;sender&#x27;" not in html


def test_a_text_input_is_bounded_alike_on_the_start_page_and_in_the_api(facts):
    topic = "t" * 2001

    page = client_as("operator").post("/pipelines/content/runs/", {"topic": topic})
    api = api_as("operator").post(
        "/api/v1/runs",
        json.dumps({"pipeline": "content", "inputs": {"topic": topic}}),
        content_type="application/json",
    )

    assert page.status_code == 400
    [said] = page.context["form"].errors["topic"]
    assert "at most 2000 characters" in said
    assert api.status_code == 422 and "at most 2,000 characters" in json.dumps(api.json())
    assert nothing_written()

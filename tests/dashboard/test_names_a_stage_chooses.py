"""Names a pipeline chooses for its outputs, inputs and form fields are data, not template
lookups: an output or a field called `items` (or `keys`, `values`) shows on the pages like
any other, where `{% for … in d.items %}` would have looked the key up and failed."""

from __future__ import annotations

import pytest
from django import forms

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.models import Gate, Run
from runs.pipeline import Input, Pipeline, Stage, StageOutput
from tests.support.pipelines import registered
from tests.support.web import client_as

pytestmark = pytest.mark.django_db(transaction=True)


class CountForm(forms.Form):
    items = forms.IntegerField(min_value=1)
    keys = forms.CharField()


def _count(ctx) -> StageOutput:
    return StageOutput(outputs={"items": 3, "values": ["a", "b"]})


def _check(ctx) -> StageOutput:
    answer = ctx.ask("check", "How many?", form=CountForm, initial={"items": 3, "keys": "k"})
    return StageOutput(outputs={"items": answer["items"]})


named = Pipeline(
    name="named-items",
    inputs=(Input("items", current=lambda pinned: "7", versioned=False),),
    tools=(),
    stages=(Stage("count", _count, consumes=("items",)), Stage("check", _check)),
)


@pytest.fixture
def gate(settings, facts) -> Gate:
    with registered(settings, "tests.dashboard.test_names_a_stage_chooses.named"):
        run = engine.start_run("named-items", {"items": "7"}, actor="test", enqueue=False)
        run = run_inline(run.pk)
        assert run.status == Run.Status.WAITING
        yield Gate.objects.get(run=run, gate_id="check")


def test_the_gate_page_shows_outputs_and_fields_named_items(gate):
    response = client_as("operator").get(f"/runs/{gate.run.public_id}/gates/{gate.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "<dt>items</dt><dd>3</dd>" in html
    assert 'name="items"' in html and 'name="keys"' in html


def test_an_answered_gate_and_its_run_show_the_answer_named_items(gate):
    answers.answer(gate.pk, {"items": 4, "keys": "k"}, actor="ana", roles={"operator"})

    operator = client_as("operator")
    page = operator.get(f"/runs/{gate.run.public_id}/gates/{gate.pk}/")
    run_page = operator.get(f"/runs/{gate.run.public_id}/")

    assert page.status_code == 200 and "<code>items</code>: 4" in page.content.decode()
    assert run_page.status_code == 200 and "items=7" in run_page.content.decode()

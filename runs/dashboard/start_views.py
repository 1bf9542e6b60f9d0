"""Starting a run from the dashboard (operators and up): the pipeline's inputs as a form, one
field each (a typed input's JSON in a text box, its schema beside it), and the start, which
pins them through `engine.start_run` as the command line and the API do. A bad input is the
form's error at that input's field, and no run is made."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs import ids
from runs.access.guards import operator_required
from runs.execution.engine import start_run
from runs.pipeline import MAX_TEXT_CHARS, Input, InvalidInput, Pipeline, UnknownPipeline
from runs.reads import pipeline_stats as stats

# A typed input's JSON as a person pastes it; the input's own bound (runs/inputs.py) applies.
MAX_FIELD_CHARS = 64 * 1024


def _field(spec: Input) -> forms.CharField:
    """An input's field: required only when the input has no default; empty otherwise, so
    the run pins what the input gives when the run starts (never read on this GET)."""
    if spec.schema is not None:
        said = f"JSON ({spec.schema.__name__})."
    elif spec.versioned:
        said = "Empty: its current version, read as the run starts."
    else:
        said = "Empty: its default."
    field = forms.CharField(
        label=spec.name,
        required=spec.current is None,
        # Typed JSON may be long; text is bounded as the API bounds it.
        max_length=MAX_FIELD_CHARS if spec.schema is not None else MAX_TEXT_CHARS,
        strip=True,
        # The input's own help is a phrase ("what the article is about"): ended before the
        # sentence that says what an empty field pins.
        help_text=" ".join(filter(None, [_sentence(spec.help), said])),
        widget=forms.Textarea(attrs={"rows": 6}) if spec.schema is not None else None,
    )
    if spec.schema is not None:
        field.json_schema = json.dumps(spec.schema.model_json_schema(), indent=2)
    return field


def _sentence(text: str) -> str:
    text = text.strip()
    if not text or text[-1] in ".!?:)":
        return text
    return f"{text[0].upper()}{text[1:]}."


class StartRunForm(forms.Form):
    """The pipeline's inputs, in the order it declares them; the values are checked by the
    start itself (Pipeline.resolve_inputs), not here."""

    def __init__(self, pipeline: Pipeline, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pipeline = pipeline
        for spec in pipeline.inputs:
            self.fields[spec.name] = _field(spec)

    def inputs(self) -> dict[str, str]:
        return {name: value for name, value in self.cleaned_data.items() if value}


def _pipeline(name: str) -> Pipeline:
    pipeline = stats.get_pipeline(name)
    if pipeline is None:
        raise Http404(f"There is no pipeline {name!r}.")
    return pipeline


@require_GET
@operator_required
def start_form(request: HttpRequest, name: str) -> HttpResponse:
    pipeline = _pipeline(name)
    context = {"pipeline": pipeline, "form": StartRunForm(pipeline)}
    return render(request, "runs/start_run.html", context)


@require_POST
@operator_required
def start(request: HttpRequest, name: str) -> HttpResponse:
    """Pin the inputs and queue the first stage; a refused input is its field's error (400)."""
    pipeline = _pipeline(name)
    form = StartRunForm(pipeline, request.POST)
    if form.is_valid():
        try:
            run = start_run(pipeline.name, form.inputs(), actor=ids.user_actor(request.user))
        except (InvalidInput, UnknownPipeline) as exc:
            field = getattr(exc, "input", "")
            form.add_error(field if field in form.fields else None, str(exc))
        else:
            return redirect("runs:run", run.pk)
    context = {"pipeline": pipeline, "form": form}
    return render(request, "runs/start_run.html", context, status=400)

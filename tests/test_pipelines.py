"""Pipelines come from settings.RESUMER_PIPELINES: a module outside this repository runs with
no edit to Resumer, and the system check names each broken entry at start-up."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid

import pytest
from django.core import checks

from runs import engine
from runs.models import Checkpoint, Effect, Run
from runs.pipeline import registry
from tests.support.processes import wait_for
from tests.support.state import run_status

OUTSIDE_PIPELINE = """
from runs.models import ReplayPolicy
from runs.pipeline import Call, KeyParts, Pipeline, Rule, Stage, StageOutput, Tool


def shout(args, key):
    return {"text": args["text"].upper()}


def post(args, key):
    return {"external_id": "note-" + key[:12], "text": args["text"]}


def greet(ctx):
    loud = ctx.call("shout", "shout", text="hello")
    note = ctx.call("post", "post", text=loud["text"])
    return StageOutput(outputs={"note": note["external_id"], "text": loud["text"]})


pipeline = Pipeline(
    name="greeter",
    tools=(
        Tool("shout", ReplayPolicy.SAFE, shout),
        Tool(
            "post",
            ReplayPolicy.IDEMPOTENT,
            post,
            key=lambda ctx, args: KeyParts("acct", "notes", ctx.root_id, "1"),
        ),
    ),
    stages=(
        Stage(
            "greet",
            greet,
            tools=("shout", "post"),
            calls=(Call("shout", "shout"), Call("post", "post")),
            rules=(Rule("says hello", lambda out: out.outputs["text"] == "HELLO"),),
        ),
    ),
)
not_a_pipeline = {"name": "greeter"}
"""


@pytest.fixture
def outside_module(tmp_path, monkeypatch) -> str:
    """A pipeline module in a folder of its own (not this repository), importable here."""
    name = f"acme_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{name}.py").write_text(textwrap.dedent(OUTSIDE_PIPELINE))
    monkeypatch.syspath_prepend(str(site))
    yield name
    sys.modules.pop(name, None)


@pytest.fixture
def use_pipelines(settings):
    """Configure RESUMER_PIPELINES for one test; the registry caches what it loaded."""

    def configure(*paths: str) -> None:
        settings.RESUMER_PIPELINES = list(paths)
        registry._pipelines = None

    yield configure
    registry._pipelines = None


def resumer_check_ids() -> list[str]:
    return sorted(m.id for m in checks.run_checks(tags=["resumer"]))


def test_a_pipeline_module_outside_the_repository_runs_on_a_real_worker(
    workers, outside_module, use_pipelines, tmp_path
):
    path = f"{outside_module}.pipeline"
    use_pipelines(path)
    assert resumer_check_ids() == []

    run = engine.start_run("greeter", {}, actor="test")
    # The worker learns of the module only from its environment, as a deployment would.
    pythonpath = os.pathsep.join(
        filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")])
    )
    workers.start(burst=True, env={"PYTHONPATH": pythonpath, "RESUMER_PIPELINES": path})
    wait_for(lambda: run_status(run) == Run.Status.SUCCEEDED, timeout=120, what="succeeded")

    checkpoint = Checkpoint.objects.get(run=run, stage="greet")
    effect = Effect.objects.get(run=run)
    assert checkpoint.outputs == {"note": effect.external_id, "text": "HELLO"}
    assert (effect.tool, effect.status) == ("post", Effect.Status.CONFIRMED)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["no_such_module.pipeline"], ["runs.E001"]),
        (["{module}.no_such_attribute"], ["runs.E001"]),
        (["{module}.not_a_pipeline"], ["runs.E002"]),
        (["{module}.pipeline", "{module}.pipeline"], ["runs.E003"]),
        ([], ["runs.W001"]),
    ],
    ids=["no-module", "no-attribute", "not-a-pipeline", "same-name", "none"],
)
def test_the_system_check_names_each_bad_pipeline_entry(
    entries, expected, outside_module, use_pipelines
):
    use_pipelines(*(entry.format(module=outside_module) for entry in entries))
    assert resumer_check_ids() == expected


@pytest.mark.parametrize("hooks", ["no_such_module.Hooks", "runs.models.Run", "runs.hooks"])
def test_the_system_check_refuses_call_hooks_that_are_not_a_call_hooks_class(hooks, settings):
    settings.RESUMER_CALL_HOOKS = hooks
    assert resumer_check_ids() == ["runs.E004"]


def test_the_demo_configuration_passes_the_system_check():
    assert resumer_check_ids() == []

"""The stage context holds its calls, its gates and its loops as parts (context.py), which
share one StageState: a departure from the approved plan found by one part is the one the
others see. And no class in runs/ declares an attribute that someone else sets, as the
mixins the context used to inherit did."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runs import engine
from runs.execution.asking import StageWaiting
from runs.execution.context import StageContext
from runs.gates.decision import GateAction
from runs.ledger import leases
from runs.ledger.append import Writer
from runs.models import Event, ReplayPolicy, Run
from runs.pipeline import Input, Pipeline, Stage, StageOutput, Tool
from runs.planning.contract import Contract, Usage
from tests.support.pipelines import registered

RUNS = Path(__file__).resolve().parent.parent.parent / "runs"
# Classes whose annotations are their fields: pydantic and ninja schemas, named tuples,
# typed dicts, protocols (a dataclass is told by its decorator).
RECORD_BASES = {"Schema", "NamedTuple", "TypedDict", "Protocol", "BaseModel"}


def _stage(ctx) -> StageOutput:
    return StageOutput(outputs={})


parts_pipeline = Pipeline(
    name="stage-parts",
    tools=(Tool("echo", ReplayPolicy.SAFE, call=lambda args, key: {"text": args["text"]}),),
    stages=(Stage("only", _stage, tools=("echo",)),),
)


@pytest.mark.django_db(transaction=True)
def test_a_departure_the_calls_found_is_not_recorded_again_by_the_gates(settings):
    with registered(settings, "tests.execution.test_stage_parts.parts_pipeline"):
        run = engine.start_run("stage-parts", {}, actor="test", enqueue=False)
        writer = Writer(run.pk, leases.acquire(run.pk, "test"), "test")
        # Resumed work whose plan promised no call and said the gate's answer was recorded.
        bound = Contract(
            "f" * 16,
            "strict",
            lines={},
            promised=Usage(),
            seq=run.last_seq,
            gates={"only/go": GateAction.USE_ANSWER},
        )
        ctx = StageContext(writer, run, parts_pipeline, "only", contract=bound)

        ctx.call("echo-1", "echo", text="unpromised")  # a SAFE call: recorded, not stopped
        with pytest.raises(StageWaiting):
            ctx.ask("go", "Go on?")  # the gate the plan said was answered: asked after all

    # One PLAN_DEVIATED, the call's: the gates saw the departure the calls recorded.
    deviations = Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED)
    assert [e.payload.get("difference", {}).get("call") for e in deviations] == ["echo-1"]
    assert Event.objects.filter(run=run, type=Event.Type.GATE_OPENED).count() == 1
    assert Run.objects.get(pk=run.pk).deviated
    assert ctx.deviated


def _record_classes(tree: ast.Module) -> set[str]:
    """The module's classes whose annotations are fields, a subclass of one included."""
    records: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
        decorators = {ast.unparse(d) for d in node.decorator_list}
        if bases & (RECORD_BASES | records) or any("dataclass" in d for d in decorators):
            records.add(node.name)
    return records


def test_no_class_in_runs_declares_an_attribute_it_does_not_set():
    declared = []
    for path in sorted(RUNS.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        records = _record_classes(tree)
        declared += [
            f"{path.relative_to(RUNS)}: {node.name}.{ast.unparse(line.target)}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.name not in records
            for line in node.body
            if isinstance(line, ast.AnnAssign) and line.value is None
        ]
    assert declared == []


def test_the_stage_context_inherits_no_part():
    assert StageContext.__bases__ == (object,)


def _reads_what_it_does_not_consume(ctx) -> StageOutput:
    return StageOutput(outputs={"topic": ctx.inputs["topic"]})


undeclared_pipeline = Pipeline(
    name="stage-parts-undeclared",
    inputs=(Input("topic", current=lambda pinned: "agents", versioned=False),),
    tools=(),
    stages=(Stage("only", _reads_what_it_does_not_consume),),
)


@pytest.mark.django_db(transaction=True)
def test_an_input_the_stage_does_not_consume_is_said_to_be_missing_from_consumes(settings):
    with registered(settings, "tests.execution.test_stage_parts.undeclared_pipeline"):
        run = engine.start_run("stage-parts-undeclared", {}, actor="test", enqueue=False)
        writer = Writer(run.pk, leases.acquire(run.pk, "test"), "test")
        ctx = StageContext(writer, run, undeclared_pipeline, "only")

        with pytest.raises(KeyError, match=r"add it to Stage\(consumes=\.\.\.\)"):
            _reads_what_it_does_not_consume(ctx)
        with pytest.raises(KeyError, match="nowhere"):
            ctx.inputs["nowhere"]

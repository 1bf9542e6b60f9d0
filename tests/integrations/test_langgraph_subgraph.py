"""An interrupt() inside a LangGraph subgraph, in this process: declared by the node that
calls it, its form rules the answer and its resume gives the node what it returns."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runs import engine
from runs.gates import answers
from runs.models import Checkpoint, Gate, GateStatus, Run
from tests.integrations import langgraph_pipelines as lgp
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = frozenset({"operator"})


@pytest.fixture(autouse=True)
def subgraph(settings, redis_conn) -> Iterator[None]:
    with registered(settings, lgp.SUBGRAPH):
        yield


def execute(run: Run) -> Run:
    run.refresh_from_db()
    engine.execute(run.pk, run.current_stage, run.ticket, holder="test")
    run.refresh_from_db()
    return run


def test_a_subgraph_nodes_interrupt_is_asked_with_the_form_declared_for_it():
    run = engine.start_run("langgraph-subgraph", {}, actor="test", enqueue=False)
    assert execute(run).status == Run.Status.WAITING
    gate = Gate.objects.get(run=run, status=GateStatus.OPEN)
    assert gate.gate_id == "drafting.interrupt-1"  # numbered by the graph's own node
    assert [f["name"] for f in gate.form] == ["text"]

    with pytest.raises(answers.InvalidAnswer):
        answers.answer(gate.pk, {"text": "no"}, actor="user:ana", roles=OPERATOR)
    answers.answer(gate.pk, {"text": "second go"}, actor="user:ana", roles=OPERATOR)

    assert execute(run).status == Run.Status.SUCCEEDED
    assert Checkpoint.objects.get(run=run).outputs == {"text": "second go"}

"""GraphAgent: a LangGraph graph run to its end inside a Resumer stage.

    agent = GraphAgent(app, tools=[file_bug, send_email],
                       interrupts={"human_review": Interrupt(form=Review, ...)})

    def support(ctx):
        state = agent.invoke(ctx, {"email_content": ctx.inputs["email"]}, model=ctx.inputs["model"])
        return StageOutput(outputs={"draft": state["draft_response"]})

    Pipeline(..., tools=(model, *agent.tools),
             stages=(Stage("support", support, tools=("model", *agent.tool_names)),))

The graph runs on the SDK's own runner (`invoke`), its chat models (ChatResumer) and durable
tools calling through the stage's context (bridge.py). An `interrupt(value)` in a node is a
Resumer gate: the stage asks it with ctx.ask (`<node>.interrupt-N`; the value shown as the
gate's details, the node's `Interrupt` saying the form and what resumes the graph) and, once
answered, resumes the graph with `Command(resume=answer)`.

Why an in-memory checkpointer per attempt, not the graph's own: the ledger is the one record.
LangGraph needs a checkpointer to interrupt and resume, and its saver would remember "node X
done" without knowing that a call's intent was written and its outcome was not, or which
answer a person gave on which gate. So each attempt compiles the graph with a fresh
InMemorySaver and runs it from the start: every model turn and tool call it made before is
replayed from the ledger by its call id (nothing billed, nothing sent again, the divergence
check on each request), the recorded gate answers resume its interrupts, and it goes on from
the first call nothing was recorded for. A graph compiled with a checkpointer of its own is
run with the fresh one instead (Pregel.copy): a module-level saver would otherwise carry one
worker's attempt into the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot
from pydantic_core import to_jsonable_python

from runs.gates.forms import AnswerForm
from runs.integrations.langgraph.bridge import Bridge
from runs.integrations.langgraph.tools import DurableTool
from runs.models import GateRole
from runs.pipeline import Context, Tool
from runs.review import OnTimeout

# A gate's heading and its details are bounded (runs/execution/asking.py says so to ctx.ask).
QUESTION_LIMIT = 200
DETAILS_LIMIT = 20_000


@dataclass(frozen=True)
class Interrupt:
    """How one node's interrupt(value) is asked of a person, and what resumes the graph.

    `form`: a Django form class (default: one text answer, whose text resumes the graph);
    `question`: the gate's heading, or a function of the value (default: the value, if it
    is text, else "<node> waits for an answer"); `initial`: a function of the value giving
    the form's values shown; `resume`: a function of the answer (the form's cleaned data)
    giving what interrupt() returns (default: the answer itself). The value itself is shown
    as the gate's details."""

    form: type | None = None
    question: str | Callable[[Any], str] = ""
    initial: Callable[[Any], dict[str, Any]] | None = None
    resume: Callable[[dict[str, Any]], Any] | None = None
    role: str = GateRole.OPERATOR
    timeout: timedelta | None = None
    on_timeout: OnTimeout | None = None
    escalate_to: str = ""


class GraphAgent:
    """A graph (a StateGraph, or one compiled) and the durable tools it calls."""

    def __init__(
        self,
        graph: StateGraph | Pregel,
        *,
        tools: Sequence[DurableTool] = (),
        interrupts: Mapping[str, Interrupt] | None = None,
    ) -> None:
        if not isinstance(graph, StateGraph | Pregel):
            raise TypeError(f"a GraphAgent runs a StateGraph or a compiled graph, not {graph!r}")
        for given in tools:
            if not isinstance(given, DurableTool):
                raise TypeError(
                    f"{getattr(given, 'name', given)!r} is not durable: wrap it with "
                    "durable(policy) (runs.integrations.langgraph) and use the wrapped tool "
                    "in the graph, or its calls bypass the ledger"
                )
        self.graph = graph
        self.durable = tuple(tools)
        self.interrupts = dict(interrupts or {})

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The pipeline tools its durable tools are called through: for Pipeline(tools=)."""
        return tuple(t.resumer for t in self.durable)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """Their names: for the stage's tools, beside its model tool."""
        return tuple(t.name for t in self.durable)

    def invoke(
        self,
        ctx: Context,
        input: Any,
        *,
        model: str | Mapping[str, str] = "",
        config: RunnableConfig | None = None,
    ) -> dict[str, Any]:
        """Run the graph from `input` to its end inside the stage; return its final state.
        `model` is the model every ChatResumer asks in this run (or a mapping from the name
        a ChatResumer declares); a gate opened stops the stage here until it is answered."""
        app = self._compiled()
        run_config: RunnableConfig = {**(config or {})}
        run_config["configurable"] = {
            **run_config.get("configurable", {}),
            "thread_id": f"{ctx.run_id}/{ctx.stage}",
        }
        stage = Bridge(ctx, tools=self.tool_names, models=model)
        return stage.run(lambda: self._drive(stage, app, input, run_config))

    def _compiled(self) -> Pregel:
        saver = InMemorySaver()
        if isinstance(self.graph, StateGraph):
            return self.graph.compile(checkpointer=saver)
        return self.graph.copy(update={"checkpointer": saver})

    def _drive(self, stage: Bridge, app: Pregel, input: Any, config: RunnableConfig) -> Any:
        """The graph's thread: invoke, then answer its interrupts, each a gate, until it
        ends without one."""
        result = app.invoke(input, config)
        while True:
            waiting = _waiting(app.get_state(config, subgraphs=True))
            if not waiting:
                return _values(result)
            answers = {
                i.id: self._answer(stage, node, inner, i.value) for node, inner, i in waiting
            }
            result = app.invoke(Command(resume=answers), config)

    def _answer(self, stage: Bridge, node: str, inner: str, value: Any) -> Any:
        """The gate of one interrupt: numbered by the graph's own node (`node`), declared by
        the node that called interrupt() (`inner`: a subgraph's, or the same)."""
        declared = self.interrupts.get(inner) or self.interrupts.get(node) or Interrupt()
        gate_id = stage.numbering.interrupt(node)
        question = _question(declared, node, value)
        answer = stage.ask(
            lambda: stage.ctx.ask(
                gate_id,
                question,
                form=declared.form or AnswerForm,
                initial=declared.initial(value) if declared.initial else None,
                role=declared.role,
                timeout=declared.timeout,
                on_timeout=declared.on_timeout,
                escalate_to=declared.escalate_to,
                details=_details(value),
            )
        )
        if declared.resume is not None:
            return declared.resume(answer)
        if declared.form is None:
            return next(iter(answer.values()), "")  # the one text answer
        return answer


def _waiting(snapshot: StateSnapshot) -> list[tuple[str, str, Any]]:
    """Each interrupt the graph waits on: its top-level node, the innermost node that called
    interrupt() (inside a subgraph: the subgraph's own; else the same), and the interrupt."""
    found = []
    for task in snapshot.tasks:
        inner = {}
        if isinstance(task.state, StateSnapshot):
            inner = {i.id: name for _, name, i in _waiting(task.state)}
        found += [(task.name, inner.get(i.id, task.name), i) for i in task.interrupts]
    return found


def _question(declared: Interrupt, node: str, value: Any) -> str:
    if callable(declared.question):
        said = declared.question(value)
    else:
        said = declared.question or (value if isinstance(value, str) else "")
    said = str(said).strip() or f"{node} waits for an answer"
    return said if len(said) <= QUESTION_LIMIT else said[: QUESTION_LIMIT - 1] + "…"


def _details(value: Any) -> str:
    """The interrupt's value as the reviewer reads it: text as it is, anything else as JSON
    (the same value, the same text: what the gate's answer is matched by)."""
    if isinstance(value, str):
        text = value
    else:
        shown = json.dumps(
            to_jsonable_python(value, fallback=str), indent=2, sort_keys=True, ensure_ascii=False
        )
        text = f"```json\n{shown}\n```"
    return text if len(text) <= DETAILS_LIMIT else text[: DETAILS_LIMIT - 1] + "…"


def _values(result: Any) -> Any:
    if isinstance(result, dict):
        return {k: v for k, v in result.items() if k != "__interrupt__"}
    return result

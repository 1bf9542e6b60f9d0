"""What a plan's calls cost: the resume's lines, and a blind retry from step one beside it.

    stage_calls()   the calls a stage is expected to make: those it declares, then those it
                    made without declaring them (an agent's loop decides its calls as it runs)
    call_line()     a call nothing has been recorded for, priced as it was asked before
    cost_of()       the calls, tools, meters and money of a list of lines
    fresh_cost()    what a retry from step one would spend

A value from values: nothing here reads the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from runs.models import Effect
from runs.pipeline import Call, Pipeline, Stage
from runs.planning import model_lines
from runs.planning.plan import Cost, EffectLine
from runs.planning.replay import CALLING, first_action
from runs.quantities import at


def stage_calls(
    stage: Stage, effects: dict[tuple[str, str], Effect], logged: Iterable[Call]
) -> list[Call]:
    """The calls a stage declares, then those it made without declaring them: the ones its
    effects record, then the ones its log recorded (SAFE calls leave no effect)."""
    calls = list(stage.calls)
    known = {c.call_id for c in calls}
    for (s, call_id), e in effects.items():
        if s == stage.name and call_id not in known:
            calls.append(Call(call_id, e.tool))
            known.add(call_id)
    for call in logged:
        if call.call_id not in known:
            calls.append(call)
            known.add(call.call_id)
    return calls


def cost_of(pipeline: Pipeline, lines: list[EffectLine]) -> Cost:
    """The calls the lines make (a reuse or a skip makes none), by tool and meter, the
    reconcile questions asked before them, and the money."""
    cost = Cost()
    money = Decimal(0)
    for line in lines:
        if line.queries:
            cost.queries[line.tool] = cost.queries.get(line.tool, 0) + line.queries
        if line.action not in CALLING:
            continue
        tool = pipeline.tool(line.tool)
        cost.tool_calls += 1
        cost.calls[tool.name] = cost.calls.get(tool.name, 0) + 1
        money += Decimal(line.cost)
        if tool.meter:
            cost.meters[tool.meter] = cost.meters.get(tool.meter, 0) + 1
    money += model_lines.price(pipeline, lines, cost)
    cost.money = str(at(money))
    return cost


def call_line(stage: str, call: Call, pipeline: Pipeline, made: Effect | None = None) -> EffectLine:
    """A call that nothing has been recorded for: it will be made. `made`: the effect of the
    same call on an earlier attempt, whose request prices it (a refund's amount), where the
    tool's `cost` is only what a plan assumes before it knows."""
    tool = pipeline.tool(call.tool)
    price = tool.price_of(made.request) if made is not None else tool.cost
    return EffectLine(
        stage, call.call_id, tool.name, str(tool.policy), "none", "", "", "",
        str(first_action(tool)), str(price), verb=tool.verb,
    )  # fmt: skip


def fresh_cost(
    pipeline: Pipeline, made: dict[tuple[str, str], Effect], planned: Iterable[EffectLine] = ()
) -> Cost:
    """What a blind retry from step one would spend: every expected call again, a call the
    run made (`made`: its effects by (stage, call id)) priced as it was asked then (the same
    inputs ask the same again).

    The calls a stage made without declaring them (an agent's loop) are expected again too:
    counting only the declared ones priced a loop's fresh retry at nothing. They are the calls
    its effects record and, for the stages the plan runs again, the calls of the plan's lines
    (`planned`, which hold the SAFE calls the log recorded). The log before the checkpoint is
    not read for an estimate, so a SAFE call a settled stage made without declaring it is not
    counted."""
    planned = list(planned)
    lines = [
        call_line(s.name, call, pipeline, made.get((s.name, call.call_id)))
        for s in pipeline.stages
        for call in stage_calls(
            s, made, (Call(line.call_id, line.tool) for line in planned if line.stage == s.name)
        )
    ]
    return cost_of(pipeline, lines)

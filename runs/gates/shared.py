"""What identical gates share, and so what one answer may give all of them.

Gates of one shape ask the same thing of different runs; each shows its own values (a
review shows its run's title and body). One answer given to many may only say what is the
same for all of them: a field is offered when every gate has it alike and shows the same
value in it; a field whose value differs from run to run is not offered, and each run keeps
the value it showed. A confirmation's editable arguments are never offered: an edit is made
on one run's own call, on its own page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runs.gates import forms
from runs.ledger.canonical import canonical_json
from runs.models import Gate, GateKind

EDIT_PREFIX = "arg_"


@dataclass(frozen=True)
class Shared:
    # The fields one answer gives every gate, as the gates' forms describe them, and the
    # value all of them show in each.
    spec: list[dict[str, Any]]
    initial: dict[str, Any]
    # The labels of the fields each run answers with its own value ("Title", "Body").
    differ: list[str]

    @property
    def names(self) -> list[str]:
        return [s["name"] for s in self.spec]


def shown(gate: Gate) -> dict[str, Any]:
    """The values the gate's form showed (the stage's initial values over the fields' own)."""
    return {s["name"]: s["initial"] for s in gate.form if "initial" in s} | dict(gate.initial)


def _field(gate: Gate, name: str) -> dict[str, Any] | None:
    return next((s for s in gate.form if s["name"] == name), None)


def shared(gates: Sequence[Gate]) -> Shared:
    """The fields of `gates` (one shape, at least one gate) that one answer may give all."""
    first = gates[0]
    values = [shown(g) for g in gates]
    offered, initial, differ = [], {}, []
    for spec in first.form:
        name = spec["name"]
        if first.kind == GateKind.CONFIRM and name.startswith(EDIT_PREFIX):
            continue
        alike = all(_field(g, name) == spec for g in gates[1:])
        same = {canonical_json(forms.jsonable(v.get(name))) for v in values}
        if alike and len(same) == 1:
            offered.append(spec)
            if name in values[0]:
                initial[name] = values[0][name]
        else:
            differ.append(spec["label"])
    return Shared(offered, initial, differ)


def not_shared(gates: Sequence[Gate], data: dict[str, Any]) -> list[str]:
    """The fields `data` gives that the gates do not share (each run answers them itself)."""
    if not gates:
        return []
    fields = {s["name"] for g in gates for s in g.form}
    offered = set(shared(gates).names)
    return sorted(name for name in data if name in fields and name not in offered)

"""Rows read as a query would return them, by SQL built once: a model's columns in field order,
each value through the converters the ORM would apply (found once per connection's vendor).
The append path reads an effect this way, the stage boundary a run and a checkpoint; compiling
a queryset for each read cost more than running it."""

from __future__ import annotations

from typing import Any

from django.db.models import Model, signals
from django.db.models.base import ModelState

__all__ = ["RowReader", "convert", "converters_of", "loaded"]


class RowReader:
    """A model's rows as Model.from_db() takes them, read by one statement: its columns in
    field order, each value through the converters a query would apply (found once)."""

    def __init__(self, model: type[Model], connection, where: str, tail: str = "") -> None:
        qn = connection.ops.quote_name
        fields = model._meta.concrete_fields
        self.model = model
        self.names = tuple(field.attname for field in fields)
        self.quoted = [qn(field.column) for field in fields]
        self.table = qn(model._meta.db_table)
        self.sql = f"SELECT {', '.join(self.quoted)} FROM {self.table} WHERE {where}{tail}"
        read = [(i, *converters_of(field, connection)) for i, field in enumerate(fields)]
        self.converters = [(i, column, found) for i, column, found in read if found]

    def columns_of(self, alias: str) -> str:
        """The select list, each column qualified by `alias` (for a statement that reads the
        row beside another)."""
        return ", ".join(f"{alias}.{column}" for column in self.quoted)

    def instance(self, row: tuple, connection) -> Model:
        values = list(row)
        for i, column, converters in self.converters:
            values[i] = convert(values[i], column, converters, connection)
        return loaded(self.model, connection.alias, self.names, values)


def loaded(model: type[Model], alias: str, names: tuple[str, ...], values) -> Model:
    """model.from_db(alias, names, values) for a row of every concrete field in model order
    (`names`, their attnames), without the constructor: from_db passes the row to __init__,
    whose per-field work cost the append path as much as hashing the event does (a tool call
    builds two). The instance is the same, marked saved on `alias`; while anything listens
    for the constructor's signals (none of Resumer's models has a receiver), from_db builds
    it and sends them."""
    if signals.pre_init.receivers or signals.post_init.receivers:
        return model.from_db(alias, names, values)
    instance = model.__new__(model)
    attributes = instance.__dict__
    attributes.update(zip(names, values, strict=True))
    state = attributes["_state"] = ModelState()
    state.adding, state.db = False, alias
    return instance


def converters_of(field, connection) -> tuple[Any, list]:
    """A model field's column expression and the converters a query applies to its values
    on this connection (the backend's, then the field's own)."""
    column = field.get_col(field.model._meta.db_table)
    return column, connection.ops.get_db_converters(column) + field.get_db_converters(connection)


def convert(value: Any, column, converters: list, connection) -> Any:
    """A value read from the database through `converters_of`' list, as a query applies it."""
    for converter in converters:
        value = converter(value, column, connection)
    return value

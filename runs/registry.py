"""The pipelines this deployment runs: RESUMER_PIPELINES, each a dotted path to a Pipeline,
imported at first use (a command line that never runs a stage never imports them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from runs.pipeline import Pipeline

__all__ = ["Registry", "UnknownPipeline", "registry"]


class UnknownPipeline(LookupError):
    pass


class Registry:
    """The registered pipelines by name."""

    def __init__(self) -> None:
        self._pipelines: dict[str, Pipeline] | None = None

    def _load(self) -> dict[str, Pipeline]:
        if self._pipelines is None:
            loaded = {}
            for path in settings.RESUMER_PIPELINES:
                pipeline = import_string(path)
                loaded[pipeline.name] = pipeline
            self._pipelines = loaded
        return self._pipelines

    def get(self, name: str) -> Pipeline:
        try:
            return self._load()[name]
        except KeyError:
            raise UnknownPipeline(
                f"unknown pipeline {name!r}; registered: {', '.join(sorted(self._load())) or 'none'}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._load())


registry = Registry()

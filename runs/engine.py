"""The engine's public face, kept at the path the peers' benchmarks and users' scripts name
(`engine.start_run(...)`, `engine.execute(...)`). The code lives in runs/execution/."""

from runs.enqueue import dispatch
from runs.execution.engine import Outcome, StageContext, execute, start_run

__all__ = ["Outcome", "StageContext", "dispatch", "execute", "start_run"]

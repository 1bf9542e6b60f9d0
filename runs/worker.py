"""The worker class at the path the Procfile and `rqworker --worker-class` name. The code lives
in runs/execution/worker.py."""

from runs.execution.worker import ResumerWorker

__all__ = ["ResumerWorker"]

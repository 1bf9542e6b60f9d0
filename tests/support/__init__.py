"""Shared test helpers, in one package: the fixtures (tests/conftest.py), the tests, the fault
matrix (tests/faults/matrix.py) and its script all import from here, never from each other.

    processes  real worker processes, a private redis-server, waiting, worker environments
    pipelines  test pipelines registered beside the configured ones
    plans      runs stopped in known states, for the reconcile-plan tests
    web        dashboard clients logged in with a role
"""

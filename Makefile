# Resumer developer commands. The two that matter:
#
#   make run    # venv + deps, migrate, Redis; then honcho runs Procfile.dev: the demo
#               # service, demo data, one worker, web server on :8000 (Ctrl-C stops them)
#   make test   # venv + deps, chromium, Redis, ruff, pytest
#
# Everything runs from the virtualenv in $(VENV); nothing is installed system-wide except
# Debian's chromium for the browser tests (only when missing, and only as root).

VENV ?= .venv
PYTHON ?= python3
PORT ?= 8000
# The demo service (renderer, asset store, platform, card processor) the demo pipeline calls.
DEMO_PORT ?= 8001
DEMO_SERVICE_URL ?= http://127.0.0.1:$(DEMO_PORT)
PYTEST_ARGS ?=
# Test processes side by side (pytest-xdist), each taking the next test when it is free
# (worksteal: a few tests take ten seconds, most a tenth). Measured fastest on a 2-core
# machine: 6 on SQLite, where a worker test spends most of its time waiting on other
# processes (4: 264 s, 6: 237 s, 8: 279 s); 3 on PostgreSQL, whose server takes its own
# share of the CPU (3: 249 s, 6: 329 s). docs/testing.md.
TEST_PROCESSES ?= $(if $(findstring postgres,$(DATABASE_URL)),3,6)
# A marker expression that selects part of the suite (.ci/run's PostgreSQL pass uses one).
TEST_MARKS ?=
REDIS_URL ?= redis://127.0.0.1:6379/0
# Tests use their own Redis database, so `make test` never flushes the dev server's queue.
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

PY := $(VENV)/bin/python
MANAGE := $(PY) manage.py
# Same directory the settings use (RESUMER_VAR_DIR, default var/).
VAR ?= $(or $(RESUMER_VAR_DIR),var)

# The settings read REDIS_URL and DEMO_SERVICE_URL from the environment; DATABASE_URL is
# passed on by make on its own when given on the command line (`make test DATABASE_URL=...`).
export REDIS_URL
export DEMO_SERVICE_URL

# The tests' defaults are in pyproject.toml (pytest's `env`), which leaves a variable that is
# already set alone: make exports the development REDIS_URL, so pytest is given the test one.
# The scripts that run without pytest (the fault matrix, the benchmarks) get TEST_ENV: the
# test Redis, and crash detection fast enough to watch a worker die.
TEST_ENV := REDIS_URL=$(TEST_REDIS_URL) RESUMER_LEASE_TTL=4 RESUMER_SWEEP_INTERVAL=0.5 RESUMER_QUEUE_GRACE=2

# The install stamp carries a hash of the requirement files: editing a pin reinstalls, an
# unchanged checkout skips pip entirely.
REQUIREMENTS := requirements.txt requirements-dev.txt requirements-agents.txt
REQ_HASH := $(shell cat $(REQUIREMENTS) 2>/dev/null | (sha256sum 2>/dev/null || shasum -a 256) | cut -c1-12)
STAMP := $(VENV)/.installed-$(REQ_HASH)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

.PHONY: help venv install run redis test test-fast coverage test-redis chromium faults bench lint format clean stop

help:
	@echo "make run     set up everything and start Redis, the demo service, one worker and the web server on :$(PORT)"
	@echo "make test    lint and run the test suite ($(TEST_PROCESSES) processes; TEST_PROCESSES=1 for one)"
	@echo "make test-fast  the tests that start no worker process and no browser"
	@echo "make coverage   the suite with line and branch coverage of runs/"
	@echo "make faults  run the fault-injection tests and the matrix script (tests/faults/run_matrix.py)"
	@echo "make bench   run every bench/*.py script"
	@echo "make lint    ruff check + ruff format --check"
	@echo "make format  ruff format + ruff check --fix"
	@echo "make stop    stop the Redis that ensure_redis started"
	@echo "make clean   remove var/ SQLite files and collected static files (keeps $(VENV))"

# --- setup ---------------------------------------------------------------------------------

venv install: $(STAMP)

$(STAMP): $(REQUIREMENTS)
	@if [ ! -x $(PY) ]; then \
	  $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	    { echo "Resumer needs Python >= 3.11; run e.g. make PYTHON=python3.11" >&2; exit 1; }; \
	  echo "Creating $(VENV) with $(PYTHON)"; \
	  $(PYTHON) -m venv $(VENV); \
	fi
	$(PY) -m pip install --disable-pip-version-check --quiet -r requirements-dev.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

# --- run -----------------------------------------------------------------------------------

# The steps before the processes run here; then honcho starts Procfile.dev's: the web server
# (given PORT), the demo service and, once the demo service answers and seed_demo has put the
# demo data in, the worker, which first prints RESUMER_BANNER. Ctrl-C (or any of them
# exiting) stops them all; Redis keeps running.
# Pipelines of your own (RESUMER_PIPELINES naming none of the demo's) run without the demo
# service and its seeded users and runs: Procfile.own.
OWN_PIPELINES := $(and $(RESUMER_PIPELINES),$(if $(findstring demo.,$(RESUMER_PIPELINES)),,own))
RUN_PROCFILE := $(if $(OWN_PIPELINES),Procfile.own,Procfile.dev)

run: $(STAMP)
	@mkdir -p $(VAR)
	$(MANAGE) migrate --noinput
	$(MANAGE) collectstatic --noinput --verbosity 0
	@# Redis first: seed_demo queues stage jobs, which must not be lost.
	$(MANAGE) ensure_redis | tee $(VAR)/redis.info
	@# The web server runs with DEBUG off unless DEBUG says otherwise (`DEBUG=1 make run`):
	@# a bad URL gets the product's 404 page, not Django's list of URL patterns, and
	@# WhiteNoise serves the static files collected above. Links in notifications follow
	@# PORT (honcho gives each process a PORT of its own, so it is fixed here).
	@# A chain key of this checkout's own, so the demo's run heads are anchored (kept in
	@# var/, never in the database; RESUMER_CHAIN_KEY set in the environment wins).
	@test -s $(VAR)/chain.key || $(PY) -c 'import secrets; print(secrets.token_urlsafe(32))' > $(VAR)/chain.key
	@export RESUMER_BANNER="$$(printf '%s\n' \
	  "" \
	  "===================================================================" \
	  " Resumer is running" \
	  "   App:     http://127.0.0.1:$(PORT)/" \
	  "   Admin:   http://127.0.0.1:$(PORT)/admin/   (RQ queues: /admin/rq/)" \
	  $(if $(OWN_PIPELINES),"   Pipelines: $(RESUMER_PIPELINES)" \
	  "   Logins:  none seeded; make one from another shell:" \
	  "            .venv/bin/python manage.py create_user NAME --role operator",\
	  "   Logins:  viewer / viewer-demo-pass" \
	  "            operator / operator-demo-pass" \
	  "            supervisor / supervisor-demo-pass") \
	  "   $$(cat $(VAR)/redis.info)" \
	  "   Worker:  its output is the lines marked worker.1" \
	  "   Chain key: $(VAR)/chain.key anchors the run heads; a manage.py command from" \
	  "            another shell needs it too: export RESUMER_CHAIN_KEY=\$$(cat $(VAR)/chain.key)" \
	  $(if $(OWN_PIPELINES),,"   Demo service (renderer, assets, platform, card): $(DEMO_SERVICE_URL)" \
	  "            its output is the lines marked demo.1") \
	  " Ctrl-C stops the web server$(if $(OWN_PIPELINES), and the worker,, the worker and the demo service) (Redis keeps running:" \
	  " 'make stop' stops it too)." \
	  "===================================================================" \
	  "")"; \
	export RESUMER_CHAIN_KEY="$${RESUMER_CHAIN_KEY:-$$(cat $(VAR)/chain.key)}"; \
	export RESUMER_PUBLIC_URL="$${RESUMER_PUBLIC_URL:-http://127.0.0.1:$(PORT)}"; \
	export DEBUG="$${DEBUG:-0}"; \
	export PATH="$(abspath $(VENV))/bin:$$PATH" PYTHONUNBUFFERED=1; \
	exec honcho -f $(RUN_PROCFILE) start -p $(PORT)

# Ensure the dev Redis (REDIS_URL) answers; .ci/run falls back to this.
redis: $(STAMP)
	$(MANAGE) ensure_redis

# --- tests ---------------------------------------------------------------------------------

# Each test process starts a redis-server of its own (tests/support/isolation.py), so the
# suite needs no Redis running and never touches the development one.
PYTEST := $(PY) -m pytest -n $(TEST_PROCESSES) --dist worksteal $(if $(TEST_MARKS),-m "$(TEST_MARKS)")

test: $(STAMP) chromium lint
	$(PYTEST) $(PYTEST_ARGS)

# The inner loop: what needs neither a worker process nor a browser, in a minute or two.
test-fast: $(STAMP)
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist worksteal -m "not workers and not browser" $(PYTEST_ARGS)

# Line and branch coverage of runs/ (in the test processes; the worker processes they start
# are not measured), as a report in the terminal.
coverage: $(STAMP) chromium
	$(PYTEST) --cov=runs --cov-branch --cov-report=term:skip-covered $(PYTEST_ARGS)

test-redis: $(STAMP)
	@mkdir -p $(VAR)
	REDIS_URL=$(TEST_REDIS_URL) $(MANAGE) ensure_redis

# The browser tests drive Debian's chromium. Without root or apt-get we only warn: those
# tests then fail with their own message saying chromium is missing (they are not skipped).
chromium:
	@if command -v chromium >/dev/null 2>&1; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing chromium for the browser tests (apt-get)"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	  echo "WARNING: apt-get install chromium failed; the browser tests will fail." >&2; \
	else \
	  echo "WARNING: chromium is not on PATH and cannot be installed here (needs root and" >&2; \
	  echo "         apt-get). The browser tests will fail; install it: apt-get install chromium" >&2; \
	fi

faults: $(STAMP) test-redis
	@# The whole crash matrix (plain `make test` runs a representative subset of it), then the
	@# script that prints the matrix and ends with "N passed, M failed".
	RESUMER_FULL_MATRIX=1 $(TEST_ENV) $(PY) -m pytest -m faults tests/faults $(PYTEST_ARGS)
	$(TEST_ENV) $(PY) tests/faults/run_matrix.py

# Benchmarks get the test Redis database and fast crash detection, like the fault tests.
# Files starting with "_" are helpers, not scripts.
bench: $(STAMP) test-redis
	@shopt -s nullglob; ran=0; \
	for script in bench/*.py; do \
	  case "$$(basename "$$script")" in _*) continue;; esac; \
	  echo "=== $$script"; \
	  $(TEST_ENV) $(PY) "$$script"; \
	  ran=$$((ran + 1)); \
	done; \
	[ "$$ran" -gt 0 ] || echo "No bench/*.py scripts."

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# --- housekeeping --------------------------------------------------------------------------

# Stops the Redis that ensure_redis started (make run's other processes end with it); a
# system or CI Redis is left alone.
stop:
	@if [ -x $(PY) ]; then \
	  $(MANAGE) ensure_redis --stop; \
	  a='$(REDIS_URL)'; b='$(TEST_REDIS_URL)'; \
	  if [ "$${a%/*}" != "$${b%/*}" ]; then REDIS_URL="$$b" $(MANAGE) ensure_redis --stop; fi; \
	fi

# Stop first: deleting SQLite files under a running worker corrupts nothing but confuses all.
clean: stop
	rm -f $(VAR)/*.sqlite3 $(VAR)/*.sqlite3-wal $(VAR)/*.sqlite3-shm $(VAR)/*.sqlite3-journal
	rm -rf $(VAR)/staticfiles

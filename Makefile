# Resumer developer commands. The two that matter:
#
#   make run    # venv + deps, migrate, Redis, the demo service, demo data, one worker,
#               # web server on :8000
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
REDIS_URL ?= redis://127.0.0.1:6379/0
# Tests use their own Redis database, so `make test` never flushes the dev server's queue.
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

PY := $(VENV)/bin/python
MANAGE := $(PY) manage.py
# Same directory the settings use (RESUMER_VAR_DIR, default var/).
VAR ?= $(or $(RESUMER_VAR_DIR),var)
WORKER_PID := $(VAR)/worker.pid
WORKER_LOG := $(VAR)/worker.log
WORKER_CMD := work
DEMO_PID := $(VAR)/demo-service.pid
DEMO_LOG := $(VAR)/demo-service.log

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
REQUIREMENTS := requirements.txt requirements-dev.txt
REQ_HASH := $(shell cat $(REQUIREMENTS) 2>/dev/null | (sha256sum 2>/dev/null || shasum -a 256) | cut -c1-12)
STAMP := $(VENV)/.installed-$(REQ_HASH)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# $(call stop_pidfile,PIDFILE,NAME,PATTERN): TERM the process in PIDFILE (if it is still
# running and its command line contains PATTERN, so a recycled pid is left alone), KILL it
# after 10 s, remove the pidfile.
define stop_pidfile
if [ -f $(1) ]; then \
  pid=$$(cat $(1)); \
  args=$$(tr '\0' ' ' 2>/dev/null < /proc/$$pid/cmdline || ps -p "$$pid" -o args= 2>/dev/null || true); \
  case "$$args" in *$(3)*) \
    echo "Stopping $(2) (pid $$pid)"; \
    kill -TERM "$$pid" 2>/dev/null || true; \
    for _ in $$(seq 1 50); do kill -0 "$$pid" 2>/dev/null || break; sleep 0.2; done; \
    kill -KILL "$$pid" 2>/dev/null || true;; \
  esac; \
  rm -f $(1); \
fi
endef

.PHONY: help venv install run redis test test-redis chromium faults bench lint format clean stop

help:
	@echo "make run     set up everything and start Redis, the demo service, one worker and the web server on :$(PORT)"
	@echo "make test    lint and run the test suite (REDIS_URL=$(TEST_REDIS_URL))"
	@echo "make faults  run the fault-injection tests and the matrix script (tests/faults/run_matrix.py)"
	@echo "make bench   run every bench/*.py script"
	@echo "make lint    ruff check + ruff format --check"
	@echo "make format  ruff format + ruff check --fix"
	@echo "make stop    stop the worker, the demo service and the Redis that ensure_redis started"
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

# One shell for the whole recipe: the trap must outlive the processes it stops. The demo
# service and the worker run in the background (a background job of a non-interactive shell
# ignores Ctrl-C), each under a supervisor that starts it again when it dies, so the trap
# stops them when runserver exits, whether by Ctrl-C, a signal or an error. The demo service
# comes first: seed_demo's runs render, upload, publish and charge there.
run: $(STAMP)
	@mkdir -p $(VAR)
	$(MANAGE) migrate --noinput
	@# Redis first: seed_demo queues stage jobs, which must not be lost.
	$(MANAGE) ensure_redis | tee $(VAR)/redis.info
	@$(call stop_pidfile,$(WORKER_PID),a worker left from an earlier run,manage.py)
	@$(call stop_pidfile,$(DEMO_PID),a demo service left from an earlier run,manage.py)
	@redis_info=$$(cat $(VAR)/redis.info); \
	stop_all() { \
	  $(call stop_pidfile,$(WORKER_PID),the worker,manage.py); \
	  $(call stop_pidfile,$(DEMO_PID),the demo service,manage.py); \
	}; \
	trap 'stop_all; exit 130' INT TERM; \
	trap stop_all EXIT; \
	echo "=== demo service started $$(date -u +%FT%TZ) ===" >> $(DEMO_LOG); \
	$(MANAGE) demo_service >> $(DEMO_LOG) 2>&1 & \
	echo $$! > $(DEMO_PID); \
	if ! $(MANAGE) demo_service --wait 60; then \
	  echo "Last lines of $(DEMO_LOG):"; tail -n 20 $(DEMO_LOG); exit 1; \
	fi; \
	$(MANAGE) seed_demo; \
	$(MANAGE) collectstatic --noinput --verbosity 0; \
	echo "=== worker started $$(date -u +%FT%TZ) ===" >> $(WORKER_LOG); \
	$(MANAGE) $(WORKER_CMD) >> $(WORKER_LOG) 2>&1 & \
	echo $$! > $(WORKER_PID); \
	sleep 1; \
	if ! kill -0 "$$(cat $(WORKER_PID))" 2>/dev/null; then \
	  echo "The worker exited at once; last lines of $(WORKER_LOG):"; tail -n 20 $(WORKER_LOG); exit 1; \
	fi; \
	echo; \
	echo "==================================================================="; \
	echo " Resumer is running"; \
	echo "   App:     http://127.0.0.1:$(PORT)/"; \
	echo "   Admin:   http://127.0.0.1:$(PORT)/admin/   (RQ queues: /admin/rq/)"; \
	echo "   Logins:  viewer / viewer-demo-pass"; \
	echo "            operator / operator-demo-pass"; \
	echo "            supervisor / supervisor-demo-pass"; \
	echo "   $$redis_info"; \
	echo "   Worker:  pid $$(cat $(WORKER_PID)), log $(WORKER_LOG)"; \
	echo "   Demo service (renderer, assets, platform, card): $(DEMO_SERVICE_URL)"; \
	echo "            pid $$(cat $(DEMO_PID)), log $(DEMO_LOG)"; \
	echo " Ctrl-C stops the web server, the worker and the demo service (Redis keeps running:"; \
	echo " 'make stop' stops it too)."; \
	echo "==================================================================="; \
	echo; \
	$(MANAGE) runserver 127.0.0.1:$(PORT)

# Ensure the dev Redis (REDIS_URL) answers; .ci/run falls back to this.
redis: $(STAMP)
	$(MANAGE) ensure_redis

# --- tests ---------------------------------------------------------------------------------

test: $(STAMP) chromium test-redis lint
	REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest $(PYTEST_ARGS)

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

# Stops what `make run` / ensure_redis started; a system or CI Redis is left alone.
stop:
	@$(call stop_pidfile,$(WORKER_PID),the worker,manage.py)
	@$(call stop_pidfile,$(DEMO_PID),the demo service,manage.py)
	@if [ -x $(PY) ]; then \
	  $(MANAGE) ensure_redis --stop; \
	  a='$(REDIS_URL)'; b='$(TEST_REDIS_URL)'; \
	  if [ "$${a%/*}" != "$${b%/*}" ]; then REDIS_URL="$$b" $(MANAGE) ensure_redis --stop; fi; \
	fi

# Stop first: deleting SQLite files under a running worker corrupts nothing but confuses all.
clean: stop
	rm -f $(VAR)/*.sqlite3 $(VAR)/*.sqlite3-wal $(VAR)/*.sqlite3-shm $(VAR)/*.sqlite3-journal
	rm -rf $(VAR)/staticfiles

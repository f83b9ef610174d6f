# Koord-Queue — every target is a one-liner a newcomer can read.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BENCH  ?=
PYTEST_ARGS ?=

.PHONY: run test lint typecheck bench install install-dev chromium migrate clean

# Runtime dependencies only; re-installed when requirements.txt changes.
$(VENV)/.run-deps: requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

# Development tools on top; re-installed when either requirements file changes.
$(VENV)/.dev-deps: $(VENV)/.run-deps requirements-dev.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

install: $(VENV)/.run-deps
install-dev: $(VENV)/.dev-deps

# Browser tests drive Debian's Chromium; it is installed once, never downloaded by Playwright.
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

run: install
	$(BIN)/python manage.py run_all

test: install-dev chromium
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(MAKE) typecheck

typecheck: install-dev
	$(BIN)/mypy

bench: install-dev
	$(BIN)/python -m tests.bench $(BENCH)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

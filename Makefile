# Every target bootstraps .venv from the committed lock file (Python 3.11+ and make are enough).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.synced

.PHONY: venv services test test-fast lint demo bench reliability workspace clean

venv: $(STAMP)

$(STAMP): uv.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==0.13.8"
	UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv sync --frozen --all-extras --inexact --python $(BIN)/python
	touch $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

# PostgreSQL and Redis for the deployment tests: started when installed and stopped. When one
# is missing, its tests are skipped and pytest ends with one line naming it (tests/conftest.py).
services:
	@bash .ci/services.sh >/dev/null 2>&1 || true

test: venv lint services
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: venv
	$(BIN)/python -m pytest -q -x -m "not e2e and not slow"

demo: venv
	$(BIN)/python -m demo

bench: venv
	$(BIN)/python -m benchmarks.run_all

reliability: venv
	rm -f benchmarks/results/reliability.json  # every row is measured again
	AIRO_RELIABILITY_FULL=1 $(BIN)/python -m pytest -q tests/reliability -p no:cacheprovider

workspace: venv
	$(BIN)/airo workspace --port 8765

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

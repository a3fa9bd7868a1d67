# Every target bootstraps .venv from the committed lock file (Python 3.11+ and make are enough).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.synced
# The lowest versions the project declares (apache-airflow's and dagster's lowest supported
# minors, the core's lowest direct dependencies), resolved by uv from pyproject.toml beside the lock.
LOWEST := .venv-lowest
LOWEST_STAMP := $(LOWEST)/.synced
LOWEST_TESTS := tests/airflow/test_airflow_provider.py tests/airflow/test_airflow_workload_checks.py \
	tests/airflow/test_airflow_operator.py::test_success \
	tests/airflow/test_airflow_deferral.py::test_trigger_ends_a_successful_run_itself \
	tests/airflow/test_airflow_deferral.py::test_trigger_resumes_a_failed_run_in_a_worker_after_first_poll_at \
	tests/dagster/test_definitions_and_errors.py \
	tests/dagster/test_ranges.py::test_a_range_run_trains_each_partition_in_its_own_task \
	tests/dagster/test_ranges.py::test_the_last_attempt_s_reports_win_and_earlier_ones_are_observations

.PHONY: venv venv-lowest services test test-lowest test-next test-fast lint docs docs-build demo bench reliability workspace clean

venv: $(STAMP)

$(STAMP): uv.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==0.13.8"
	# Bytecode compiled at install, as pip does: every Airflow and Dagster process the tests
	# start would otherwise compile its imports again where nothing may write .pyc files
	# (PYTHONDONTWRITEBYTECODE), ~2 s of CPU per `import airflow.sdk`.
	UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv sync --frozen --all-extras --group dev --inexact \
		--compile-bytecode --python $(BIN)/python
	$(BIN)/python -m compileall -q air_runtime providers dagster_air demo image_fixtures
	touch $(STAMP)

venv-lowest: $(LOWEST_STAMP)

$(LOWEST_STAMP): pyproject.toml $(STAMP)
	$(BIN)/uv venv -q --allow-existing --python $(BIN)/python $(LOWEST)
	$(BIN)/uv pip compile -q pyproject.toml --extra airflow --extra local --extra dagster \
		--resolution lowest-direct --python $(LOWEST)/bin/python -o $(LOWEST)/requirements.txt
	$(BIN)/uv pip install -q --compile-bytecode --python $(LOWEST)/bin/python -r $(LOWEST)/requirements.txt \
		$$($(BIN)/uv pip freeze --python $(BIN)/python | grep -E '^(pytest|pytest-asyncio|pytest-timeout)==')
	$(BIN)/uv pip install -q --python $(LOWEST)/bin/python --no-deps -e .
	touch $(LOWEST_STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# PostgreSQL and Redis for the deployment tests: started when installed and stopped. When one
# is missing, its tests are skipped and pytest ends with one line naming it (tests/conftest.py).
services:
	@bash .ci/services.sh >/dev/null 2>&1 || true

# Two workers: most tests wait on runs and processes rather than compute (tests/conftest.py
# schedules whole files, the Airflow tests together, the deployments in two halves that each
# run one at a time, the longest first).
test: venv lint docs-build services test-lowest
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2

# A few Airflow and Dagster tests on the lowest supported versions (the whole suite runs on the
# locked ones).
test-lowest: venv-lowest
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider $(LOWEST_TESTS)

# The Airflow and Dagster tests, their deployment tests included (what a new scheduler, API
# server or triggerer changes shows only there), on the newest pre-release of apache-airflow and
# Dagster's newest release, in a venv of their own resolved anew each time
# (scripts/venv_next.py). Not part of `make test` nor CI: it tells what the next versions break.
NEXT := .venv-next
# tests/airflow last: pytest imports the conftest.py of every argument up front, each as the
# module `conftest`, and Airflow test files import helpers from theirs (the last one loaded).
NEXT_TESTS := tests/e2e/test_airflow_*.py tests/e2e/test_dagster_*.py tests/dagster tests/airflow
WORKERS ?= 2

test-next: venv services
	$(BIN)/python scripts/venv_next.py $(NEXT) $(BIN)/uv
	$(NEXT)/bin/python -m pytest -q -p no:cacheprovider -n $(WORKERS) $(NEXT_TESTS)

test-fast: venv
	$(BIN)/python -m pytest -q -x -m "not e2e and not slow" -n 2

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link, a missing
# reference or a docstring the reference cannot render; the site goes to build/site.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs-build: venv
	$(MKDOCS) build --strict

# Serves the site on this machine only, rebuilt on every change.
docs: venv
	$(MKDOCS) serve --strict --dev-addr 127.0.0.1:8000

demo: venv services
	$(BIN)/python -m demo

bench: venv
	$(BIN)/python -m benchmarks.run_all

reliability: venv
	rm -f benchmarks/results/reliability.json  # every row is measured again
	AIRO_RELIABILITY_FULL=1 $(BIN)/python -m pytest -q tests/reliability -p no:cacheprovider

workspace: venv
	$(BIN)/airo workspace --port 8765

clean:
	rm -rf $(VENV) $(LOWEST) $(NEXT) .mypy_cache .ruff_cache .pytest_cache

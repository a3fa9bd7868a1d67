"""A rank logs to its attempt's MLflow run with the real `mlflow` client, and a client reads
the run back through the MLflow REST API (runs/get, metrics/get-history)."""

from __future__ import annotations

import httpx
import pytest

from tests.local_workspace.conftest import Workloads

pytest.importorskip("mlflow")

# What HuggingFace Trainer's MLflow callback logs, in the shape the CLI's progress estimate
# reads (eta.go): `max_steps` as a param, `epoch` at each global step.
TRAINING = r"""
python - <<'EOF'
import os
import mlflow

given = os.environ["MLFLOW_RUN_ID"], os.environ["MLFLOW_EXPERIMENT_ID"]
with mlflow.start_run() as run:  # resumes MLFLOW_RUN_ID (and takes it out of os.environ)
    assert (run.info.run_id, run.info.experiment_id) == given, run.info
    mlflow.log_param("max_steps", 200)
    mlflow.log_params({"learning_rate": 0.1, "num_train_epochs": 2})
    for step in range(10, 60, 10):
        mlflow.log_metric("epoch", step / 100, step=step)
    mlflow.log_metrics({"loss": 0.5, "epoch": 0.6}, step=60)
    print("logged", run.info.run_id, flush=True)
EOF
"""


def _mlflow_ids(api: httpx.Client, task_run_id: int) -> dict[str, str]:
    response = api.get("/api/2.2/jobs/runs/get-output", params={"run_id": task_run_id})
    response.raise_for_status()
    ids: dict[str, str] = response.json()["ai_runtime_task_output"]
    return ids


def test_a_rank_logs_params_and_metrics_with_the_mlflow_client(
    workloads: Workloads, api: httpx.Client
) -> None:
    run = workloads.wait(workloads.submit(workloads.command_task(TRAINING)), timeout=120)
    logs = workloads.logs(run["run_id"])
    assert run["state"]["result_state"] == "SUCCESS", (run["state"], logs)
    ids = _mlflow_ids(api, run["tasks"][0]["run_id"])
    assert f"logged {ids['mlflow_run_id']}" in logs

    got = api.get("/api/2.0/mlflow/runs/get", params={"run_id": ids["mlflow_run_id"]})
    got.raise_for_status()
    data = got.json()["run"]["data"]
    params = {p["key"]: p["value"] for p in data["params"]}
    assert params == {"max_steps": "200", "learning_rate": "0.1", "num_train_epochs": "2"}
    latest = {m["key"]: (m["value"], m["step"]) for m in data["metrics"]}
    assert latest == {"epoch": (0.6, 60), "loss": (0.5, 60)}
    assert got.json()["run"]["info"]["experiment_id"] == ids["mlflow_experiment_id"]

    history = api.get(
        "/api/2.0/mlflow/metrics/get-history",
        params={"run_id": ids["mlflow_run_id"], "metric_key": "epoch"},
    )
    history.raise_for_status()
    points = history.json()["metrics"]
    assert [(p["step"], p["value"]) for p in points] == [
        (10, 0.1),
        (20, 0.2),
        (30, 0.3),
        (40, 0.4),
        (50, 0.5),
        (60, 0.6),
    ]
    assert all(p["timestamp"] > 0 for p in points)


SHOW_TOKEN = (
    'echo "host=$DATABRICKS_HOST uri=$MLFLOW_TRACKING_URI token=${DATABRICKS_TOKEN:-none}"\n'
    "sed -n 's/^token = //p' \"$DATABRICKS_CONFIG_FILE\" > token.txt\n"
    'stat -c "config mode %a" "$DATABRICKS_CONFIG_FILE"\n'
)


def test_the_rank_token_is_its_own_and_ends_with_the_attempt(
    workloads: Workloads, api: httpx.Client, tmp_path
) -> None:
    command = SHOW_TOKEN.replace("token.txt", str(tmp_path / "token.txt"))
    run = workloads.wait(workloads.submit(workloads.command_task(command)))
    assert run["state"]["result_state"] == "SUCCESS", workloads.logs(run["run_id"])
    lines = workloads.logs(run["run_id"])
    # The credential is in a private config file, not in the environment.
    assert f"host={workloads.workspace.host} uri=databricks token=none" in lines
    assert "config mode 600" in lines
    token = (tmp_path / "token.txt").read_text().strip()
    assert token and token != workloads.workspace.token
    answer = httpx.get(
        f"{workloads.workspace.host}/api/2.0/preview/scim/v2/Me",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 403  # revoked once the attempt ended


def test_logging_follows_the_mlflow_api_rules(workloads: Workloads, api: httpx.Client) -> None:
    run = workloads.wait(workloads.submit(workloads.command_task("true\n")))
    run_id = _mlflow_ids(api, run["tasks"][0]["run_id"])["mlflow_run_id"]

    api.post(
        "/api/2.0/mlflow/runs/log-parameter", json={"run_id": run_id, "key": "a", "value": "1"}
    ).raise_for_status()
    again = api.post(
        "/api/2.0/mlflow/runs/log-parameter", json={"run_id": run_id, "key": "a", "value": "1"}
    )
    assert again.status_code == 200  # the same value again is fine
    changed = api.post(
        "/api/2.0/mlflow/runs/log-parameter", json={"run_id": run_id, "key": "a", "value": "2"}
    )
    assert changed.status_code == 400
    assert changed.json()["error_code"] == "INVALID_PARAMETER_VALUE"

    batch = {
        "run_id": run_id,
        "metrics": [
            {"key": "epoch", "value": i / 10, "timestamp": 1000 * i, "step": i} for i in range(5)
        ],
        "params": [{"key": "max_steps", "value": "10"}],
        "tags": [{"key": "team", "value": "research"}],
    }
    api.post("/api/2.0/mlflow/runs/log-batch", json=batch).raise_for_status()
    page = api.get(
        "/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": "epoch", "max_results": 3},
    ).json()
    assert [p["step"] for p in page["metrics"]] == [0, 1, 2]
    rest = api.get(
        "/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": "epoch", "page_token": page["next_page_token"]},
    ).json()
    assert [p["step"] for p in rest["metrics"]] == [3, 4]
    assert "next_page_token" not in rest

    unknown = api.post(
        "/api/2.0/mlflow/runs/log-metric",
        json={"run_id": "0" * 32, "key": "epoch", "value": 1, "timestamp": 1, "step": 1},
    )
    assert unknown.status_code == 404
    assert unknown.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    bad = api.post(
        "/api/2.0/mlflow/runs/log-metric",
        json={"run_id": run_id, "key": "epoch", "value": "fast", "timestamp": 1},
    )
    assert bad.status_code == 400


def test_the_run_page_shows_a_running_attempts_progress(
    workloads: Workloads, api: httpx.Client, tmp_path
) -> None:
    release = tmp_path / "release"
    command = f"while [ ! -e {release} ]; do sleep 0.05; done\n"
    run_id = workloads.submit(workloads.command_task(command))
    try:
        run = workloads.wait_for(run_id, "RUNNING")
        mlflow_run = _mlflow_ids(api, run["tasks"][0]["run_id"])["mlflow_run_id"]
        # eta.go's contract: max_steps, and `epoch` at each global step (10 steps/s here).
        batch = {
            "run_id": mlflow_run,
            "params": [{"key": "max_steps", "value": "1000"}],
            "metrics": [
                {"key": "epoch", "value": s / 1000, "timestamp": 100 * s, "step": s}
                for s in range(100, 301, 50)
            ],
        }
        api.post("/api/2.0/mlflow/runs/log-batch", json=batch).raise_for_status()
        page = api.get(f"/jobs/runs/{run_id}").text
        assert '<dt>Progress</dt><dd class="progress">30% · ~1m left</dd>' in page
    finally:
        release.touch()
    workloads.wait(run_id)
    assert "<dt>Progress</dt>" not in api.get(f"/jobs/runs/{run_id}").text

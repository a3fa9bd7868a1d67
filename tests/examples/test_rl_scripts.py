"""The toy RL scripts run as real processes with the environment the platform injects."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

RL_DIR = Path(__file__).resolve().parents[2] / "examples" / "rl"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def platform_env(rank: int, port: int, output_dir: Path | str, **extra: str) -> dict[str, str]:
    """What docs/spec/workload.md §7 promises every container of a 2-node run (plus
    RL_OUTPUT_DIR, left unset when empty)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RL_"))}
    env.update(
        NUM_NODES="2",
        LOCAL_WORLD_SIZE="1",
        WORLD_SIZE="2",
        POD_RANK=str(rank),
        NODE_RANK=str(rank),
        LOCAL_ADDR="127.0.0.1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        CODE_SOURCE_PATH=str(RL_DIR),
        RL_OUTPUT_DIR=str(output_dir),
    )
    env.update(extra)
    if not output_dir:
        del env["RL_OUTPUT_DIR"]
    return env


def container_dir(root: Path, name: str, hyperparameters: dict[str, object] | None) -> Path:
    """A launch folder like containers/<name>/, with hyperparameters.yaml next to the command."""
    folder = root / "containers" / name
    folder.mkdir(parents=True, exist_ok=True)
    if hyperparameters is not None:
        (folder / "hyperparameters.yaml").write_text(yaml.safe_dump(hyperparameters))
    return folder


def start(script: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RL_DIR / script)],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{proc.args} did not finish in {timeout}s:\n{out}")
    return proc.returncode, out


HYPERPARAMETERS = {
    "learning_rate": 0.1,
    "epochs": 12,
    "rollouts_per_epoch": 32,
    "seed": 3,
    "min_reward": 0.6,
}


def train(
    tmp_path: Path,
    trainer_first: bool = False,
    hyperparameters: dict[str, object] | None = None,
    checkpoints: Path | None = None,
    server_first: bool = False,
) -> tuple[dict[str, object], str, str]:
    """Both ranks, started together; ``server_first``: the trainer only once the server
    said it serves (so it finds it at its first ask); ``trainer_first``: the server only
    once the trainer has asked and found nothing."""
    port = free_port()
    extra = {"AIRO_CHECKPOINT_DIR": str(checkpoints)} if checkpoints is not None else {}
    out_dir = tmp_path / "output"
    hyperparameters = hyperparameters or HYPERPARAMETERS
    server_cwd = container_dir(tmp_path, "inference", hyperparameters)
    trainer_cwd = container_dir(tmp_path, "trainer", hyperparameters)
    first_line = ""  # the server's, when read before the trainer starts
    if trainer_first:  # ranks start in any order: the trainer must wait for the server
        # The port answers nothing until the trainer has asked once: the server starts only
        # after the trainer found no server there.
        with socket.create_server(("127.0.0.1", port)) as nothing_yet:
            nothing_yet.settimeout(30)
            trainer = start("trainer.py", trainer_cwd, platform_env(1, port, out_dir, **extra))
            first_ask, _ = nothing_yet.accept()
            first_ask.close()
        server = start("policy_server.py", server_cwd, platform_env(0, port, out_dir))
    else:
        server = start("policy_server.py", server_cwd, platform_env(0, port, out_dir))
        if server_first:  # its port listens before it says so
            assert server.stdout is not None
            first_line = server.stdout.readline()
            assert "serving a 4-armed bandit policy" in first_line, first_line
        trainer = start("trainer.py", trainer_cwd, platform_env(1, port, out_dir, **extra))
    trainer_rc, trainer_log = finish(trainer)
    server_rc, server_log = finish(server)
    server_log = first_line + server_log
    assert (trainer_rc, server_rc) == (0, 0), f"trainer:\n{trainer_log}\nserver:\n{server_log}"
    metrics = json.loads((out_dir / "metrics.json").read_text())
    return metrics, trainer_log, server_log


def test_trainer_learns_the_best_arm_and_shuts_the_server_down(tmp_path: Path) -> None:
    metrics, trainer_log, server_log = train(tmp_path)

    assert metrics["epochs"] == 12
    assert len(metrics["history"]) == 12
    assert metrics["final_policy"]["best_action"] == 2
    assert metrics["mean_reward"] >= 0.6
    assert metrics["expected_reward"] > metrics["history"][0]["expected_reward"]
    assert "epoch 12/12: mean reward" in trainer_log
    assert "learning_rate=0.1 epochs=12 rollouts_per_epoch=32" in trainer_log
    assert "serving a 4-armed bandit policy on 0.0.0.0:" in server_log
    assert "shutdown requested after 12 updates" in server_log


def test_training_is_deterministic_for_a_seed_and_tolerates_start_order(tmp_path: Path) -> None:
    first, first_log, _ = train(tmp_path / "a", server_first=True)
    second, trainer_log, _ = train(tmp_path / "b", trainer_first=True)

    for metrics in (first, second):
        metrics.pop("train_seconds")
    assert first == second
    # The server already serving: found at the first ask.
    assert "is healthy (attempt 1)" in first_log, first_log
    # Found no server at first, asked again and found it.
    attempt = re.search(r"is healthy \(attempt (\d+)\)", trainer_log)
    assert attempt and int(attempt.group(1)) >= 2, trainer_log


def test_the_trainer_resumes_from_the_newest_checkpoint(tmp_path: Path) -> None:
    """With AIRO_CHECKPOINT_DIR, every epoch is saved; a run cut short after epoch 6 (its
    later checkpoints gone) resumes at epoch 7 with the saved policy and history."""
    folder = tmp_path / "checkpoints"
    whole, _, _ = train(tmp_path / "a", checkpoints=folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"step-{n}.json" for n in range(1, 13)
    )
    for epoch in range(7, 13):  # as if the node had been lost during epoch 7
        (folder / f"step-{epoch}.json").unlink()
    resumed, trainer_log, server_log = train(tmp_path / "b", checkpoints=folder)
    assert f"resuming after epoch 6 from {folder}" in trainer_log
    assert "epoch 6/12" not in trainer_log and "epoch 7/12" in trainer_log
    assert "loaded a checkpoint's policy at update 6" in server_log
    assert "shutdown requested after 12 updates" in server_log
    assert [h["epoch"] for h in resumed["history"]] == list(range(1, 13))
    assert resumed["history"][:6] == whole["history"][:6]  # the saved epochs, not re-run
    assert resumed["final_policy"]["best_action"] == 2


def test_the_example_pipeline_parameters_learn_and_pass_the_gate(tmp_path: Path) -> None:
    """grpo_two_containers.yaml then evaluate.yaml, with the parameters those files carry."""
    train_params = yaml.safe_load((RL_DIR / "grpo_two_containers.yaml").read_text())["parameters"]
    eval_params = yaml.safe_load((RL_DIR / "evaluate.yaml").read_text())["parameters"]
    metrics, _, _ = train(tmp_path, hyperparameters=train_params)

    first_expected = metrics["history"][0]["expected_reward"]
    assert metrics["expected_reward"] > first_expected > 0.5  # it learns, from uniform (0.5)
    rc, out = finish(
        start(
            "evaluate.py",
            container_dir(tmp_path, "evaluate", eval_params),
            platform_env(0, 0, tmp_path / "output"),
        )
    )
    assert rc == 0, out
    assert "PASS: mean reward" in out


def test_evaluate_passes_fails_and_reports_missing_metrics(tmp_path: Path) -> None:
    out_dir = tmp_path / "output"
    out_dir.mkdir()
    (out_dir / "metrics.json").write_text(
        json.dumps({"mean_reward": 0.75, "epochs": 5, "final_policy": {"best_action": 2}})
    )
    env = platform_env(0, 0, out_dir)

    passing = container_dir(tmp_path, "pass", {"min_reward": 0.7})
    rc, out = finish(start("evaluate.py", passing, env))
    assert rc == 0, out
    assert "PASS: mean reward 0.750 >= min_reward 0.700" in out

    failing = container_dir(tmp_path, "fail", {"min_reward": 0.8})
    rc, out = finish(start("evaluate.py", failing, env))
    assert rc == 1, out
    assert "FAIL: mean reward 0.750 is below min_reward 0.800" in out

    missing_env = platform_env(0, 0, tmp_path / "nowhere")
    rc, out = finish(start("evaluate.py", passing, missing_env))
    assert rc == 2
    assert "metrics.json does not exist" in out


def test_trainer_gives_up_when_the_server_never_comes(tmp_path: Path) -> None:
    env = platform_env(1, free_port(), tmp_path / "output", RL_HEALTH_TIMEOUT_SECONDS="1")
    rc, out = finish(start("trainer.py", container_dir(tmp_path, "trainer", None), env))

    assert rc == 2
    assert "not healthy after 1s" in out
    assert not (tmp_path / "output" / "metrics.json").exists()


def test_policy_server_endpoints_and_idle_timeout(tmp_path: Path) -> None:
    port = free_port()
    env = platform_env(0, port, tmp_path / "output", RL_IDLE_TIMEOUT_SECONDS="1.5")
    server = start("policy_server.py", container_dir(tmp_path, "inference", None), env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                health = json.load(urllib.request.urlopen(base + "/health", timeout=1))
                break
            except OSError:
                assert time.monotonic() < deadline, "policy server did not come up"
                time.sleep(0.1)
        assert health == {"status": "ok", "step": 0, "num_actions": 4}

        request = urllib.request.Request(base + "/rollout", data=b'{"n": 5}', method="POST")
        rollout = json.load(urllib.request.urlopen(request, timeout=5))
        assert len(rollout["rollouts"]) == 5
        assert rollout["probs"] == [0.25] * 4
        assert rollout["expected_reward"] == pytest.approx(0.5)
    except BaseException:
        server.kill()
        raise
    # No more requests: the idle timeout must end it with a non-zero code.
    rc, out = finish(server, timeout=15)
    assert rc == 1
    assert "no request for 2s, giving up" in out


@pytest.mark.parametrize("given", ["", "airflow/rl_pipeline/manual__1"])
def test_the_default_output_folder_is_the_users_own_and_private(tmp_path: Path, given: str) -> None:
    """Unset (the example YAMLs) or relative (the example Dag and Dagster sweep), the output
    goes under ~/.cache/airo-rl of the user running the ranks, created 0700, and the
    evaluation reads it from there: never a folder shared by every user of the machine."""
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    params = container_dir(tmp_path, "trainer", HYPERPARAMETERS)
    server = start("policy_server.py", params, platform_env(0, port, given, HOME=str(home)))
    trainer = start("trainer.py", params, platform_env(1, port, given, HOME=str(home)))
    trainer_rc, trainer_log = finish(trainer)
    server_rc, server_log = finish(server)
    assert (trainer_rc, server_rc) == (0, 0), trainer_log + server_log

    root = home / ".cache" / "airo-rl"
    out = root / given
    assert (out / "metrics.json").is_file(), trainer_log
    for folder in {home / ".cache", root, out, *[p for p in out.parents if root in p.parents]}:
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    evaluation = container_dir(tmp_path, "evaluate", {"min_reward": 0.0})
    rc, log = finish(start("evaluate.py", evaluation, platform_env(0, 0, given, HOME=str(home))))
    assert rc == 0 and "PASS" in log, log


def test_no_example_writes_to_a_folder_shared_by_every_user() -> None:
    repo = RL_DIR.parents[1]
    files = [
        *(repo / "examples").rglob("*.y*ml"),
        *(repo / "examples").rglob("*.py"),
        repo / "dags" / "rl_pipeline.py",
    ]
    assert [str(f) for f in files if "/tmp/airo-rl" in f.read_text()] == []

"""Rank 1 of the toy RL workload: REINFORCE against the policy server on rank 0.

Stands in for a TRL/GRPO trainer. Waits for ``http://$MASTER_ADDR:$MASTER_PORT/health``,
reads ``hyperparameters.yaml`` from its working directory (``learning_rate``, ``epochs``,
``rollouts_per_epoch``, ``evaluation_rollouts``), then per epoch pulls a batch of rollouts, computes the
policy gradient with a mean-reward baseline and sends it back. Writes
``$RL_OUTPUT_DIR/metrics.json``, tells the server to shut down and exits 0.

Run from Dagster, it reports the grpo asset's blocking check ``reward_learned`` (the final
mean reward reached ``min_train_reward``) through Dagster Pipes: the evaluation stage starts
only once it passed.

With ``AIRO_CHECKPOINT_DIR`` (a checkpoint folder that outlives failures), it saves the
policy after every epoch as ``step-<epoch>.json`` and, when the folder holds one, starts
from the newest: the server takes its policy back and the epochs before it are not run again.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rl_common import METRICS_FILE, fail, load_hyperparameters, log, make_private_dir, output_dir

ROLE = "trainer"
DEFAULTS = {
    "learning_rate": 0.05,
    "epochs": 5,
    "rollouts_per_epoch": 16,
    "evaluation_rollouts": 256,
    "min_train_reward": 0.3,
}
DEFAULT_HEALTH_TIMEOUT_SECONDS = 60.0


def call(
    base_url: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10.0
) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base_url + path,
        data=data,
        headers={"Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_for_server(base_url: str, timeout: float) -> None:
    # Rank 0 may start after us: poll its health endpoint, but never wait forever.
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        try:
            call(base_url, "/health", timeout=2.0)
            log(ROLE, f"policy server at {base_url} is healthy (attempt {attempts})")
            return
        except (urllib.error.URLError, OSError, ValueError):
            if time.monotonic() >= deadline:
                fail(ROLE, f"policy server at {base_url} not healthy after {timeout:.0f}s")
            time.sleep(0.2)


def policy_gradient(rollouts: list[dict[str, Any]], probs: list[float]) -> list[float]:
    """REINFORCE with a mean baseline: sum over the batch of (r - b) * d log pi(a) / d logits.

    Summed, not averaged, as in a loss of ``-sum(advantage * log_prob)``: a bigger batch
    takes a bigger, better-informed step.
    """
    baseline = sum(r["reward"] for r in rollouts) / len(rollouts)
    gradient = [0.0] * len(probs)
    for rollout in rollouts:
        advantage = rollout["reward"] - baseline
        for k, p in enumerate(probs):
            gradient[k] += advantage * ((1.0 if k == rollout["action"] else 0.0) - p)
    return gradient


def report_reward_check(mean_reward: float, min_reward: float) -> None:
    """The blocking check of the grpo asset, reported through Dagster Pipes when Dagster
    started the run (nothing to report otherwise)."""
    if not os.environ.get("DAGSTER_PIPES_CONTEXT"):
        return
    try:
        from dagster_pipes import open_dagster_pipes
    except ImportError:
        log(ROLE, "dagster-pipes is not installed: reward_learned is not reported (it fails)")
        return
    with open_dagster_pipes() as pipes:
        pipes.report_asset_check(
            "reward_learned",
            passed=mean_reward >= min_reward,
            metadata={"mean_reward": mean_reward, "min_train_reward": min_reward},
        )


def checkpoint_dir() -> Path | None:
    folder = os.environ.get("AIRO_CHECKPOINT_DIR")
    return Path(folder) if folder else None


def newest_checkpoint(folder: Path | None) -> dict[str, Any] | None:
    """The checkpoint of the highest epoch in ``folder`` (``step-<epoch>.json``), if any."""
    if folder is None or not folder.is_dir():
        return None
    epochs = [p.name[len("step-") : -len(".json")] for p in folder.glob("step-*.json")]
    found = max((int(e) for e in epochs if e.isdigit()), default=None)
    if found is None:
        return None
    saved: dict[str, Any] = json.loads((folder / f"step-{found}.json").read_text(encoding="utf-8"))
    return saved


def save_checkpoint(folder: Path, epoch: int, probs: list[float], history: list[Any]) -> None:
    # The policy's logits up to a constant (a softmax does not see it); written whole, then
    # renamed into place: a rank killed mid-write leaves no half checkpoint.
    logits = [math.log(max(p, 1e-300)) for p in probs]
    partial = folder / f"step-{epoch}.json.tmp"
    partial.write_text(json.dumps({"epoch": epoch, "logits": logits, "history": history}))
    partial.replace(folder / f"step-{epoch}.json")


def main() -> int:
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        fail(
            ROLE,
            "MASTER_ADDR/MASTER_PORT are not set; this script runs as rank 1 of a "
            "multi-node workload",
        )
    base_url = f"http://{addr}:{port}"
    params = {**DEFAULTS, **load_hyperparameters()}
    learning_rate = float(params["learning_rate"])
    epochs = int(params["epochs"])
    batch = int(params["rollouts_per_epoch"])
    if epochs < 1 or batch < 1:
        fail(ROLE, f"epochs and rollouts_per_epoch must be >= 1, got {epochs} and {batch}")
    log(
        ROLE,
        f"hyperparameters: learning_rate={learning_rate} epochs={epochs} "
        f"rollouts_per_epoch={batch} (world size {os.environ.get('WORLD_SIZE', '?')})",
    )

    wait_for_server(
        base_url, float(os.environ.get("RL_HEALTH_TIMEOUT_SECONDS", DEFAULT_HEALTH_TIMEOUT_SECONDS))
    )
    history: list[dict[str, Any]] = []
    first = 1
    checkpoints = checkpoint_dir()
    resumed = newest_checkpoint(checkpoints)
    if resumed is not None:
        call(base_url, "/load", {"logits": resumed["logits"], "step": resumed["epoch"]})
        history, first = list(resumed["history"]), int(resumed["epoch"]) + 1
        log(ROLE, f"resuming after epoch {resumed['epoch']} from {checkpoints}")
    if checkpoints is not None:
        make_private_dir(checkpoints)
    started = time.monotonic()
    for epoch in range(first, epochs + 1):
        batch_result = call(base_url, "/rollout", {"n": batch})
        rollouts = batch_result["rollouts"]
        mean_reward = sum(r["reward"] for r in rollouts) / len(rollouts)
        update = call(
            base_url,
            "/update",
            {
                "gradient": policy_gradient(rollouts, batch_result["probs"]),
                "learning_rate": learning_rate,
            },
        )
        history.append(
            {
                "epoch": epoch,
                "mean_reward": mean_reward,
                "expected_reward": update["expected_reward"],
            }
        )
        log(
            ROLE,
            f"epoch {epoch}/{epochs}: mean reward {mean_reward:.3f}, "
            f"expected reward after update {update['expected_reward']:.3f}",
        )
        if checkpoints is not None:
            save_checkpoint(checkpoints, epoch, update["probs"], history)

    # Judge the trained policy on a larger batch than training used: less sampling noise.
    final = call(base_url, "/rollout", {"n": int(params["evaluation_rollouts"])})
    probs = final["probs"]
    metrics = {
        # Reward of a fresh evaluation batch sampled from the trained policy.
        "mean_reward": sum(r["reward"] for r in final["rollouts"]) / len(final["rollouts"]),
        "expected_reward": final["expected_reward"],
        "epochs": epochs,
        "rollouts_per_epoch": batch,
        "learning_rate": learning_rate,
        "history": history,
        "final_policy": {"probs": probs, "best_action": probs.index(max(probs))},
        "train_seconds": round(time.monotonic() - started, 3),
    }
    out = make_private_dir(output_dir())
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    log(
        ROLE,
        f"final mean reward {metrics['mean_reward']:.3f} (expected "
        f"{metrics['expected_reward']:.3f}), best action {metrics['final_policy']['best_action']}; "
        f"wrote {out / METRICS_FILE}",
    )

    report_reward_check(metrics["mean_reward"], float(params["min_train_reward"]))
    try:
        call(base_url, "/shutdown", {})
    except (urllib.error.URLError, OSError) as exc:
        log(ROLE, f"policy server did not acknowledge shutdown: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

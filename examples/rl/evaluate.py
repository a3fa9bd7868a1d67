"""Evaluation stage of the toy RL pipeline: gate on the trainer's reward.

Reads ``$RL_OUTPUT_DIR/metrics.json`` (written by ``trainer.py``) and ``min_reward`` from
``hyperparameters.yaml`` in the working directory. Exits 0 when ``mean_reward`` reaches
the threshold, 1 when it is below, 2 when the metrics are missing or unreadable; writes
its verdict to ``$RL_OUTPUT_DIR/evaluation.json``.
"""

from __future__ import annotations

import json
import sys

from rl_common import METRICS_FILE, fail, load_hyperparameters, log, output_dir

ROLE = "evaluate"
EVALUATION_FILE = "evaluation.json"
DEFAULT_MIN_REWARD = 0.6


def main() -> int:
    path = output_dir() / METRICS_FILE
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
        mean_reward = float(metrics["mean_reward"])
    except FileNotFoundError:
        fail(
            ROLE, f"{path} does not exist: did the training stage run with the same RL_OUTPUT_DIR?"
        )
    except (ValueError, KeyError, TypeError) as exc:
        fail(ROLE, f"{path} is not valid trainer output: {exc!r}")
    min_reward = float(load_hyperparameters().get("min_reward", DEFAULT_MIN_REWARD))
    best = metrics.get("final_policy", {}).get("best_action")
    log(
        ROLE,
        f"trained for {metrics.get('epochs', '?')} epochs; mean reward {mean_reward:.3f}, "
        f"best action {best}",
    )
    verdict = {"mean_reward": mean_reward, "min_reward": min_reward}
    verdict["passed"] = mean_reward >= min_reward
    (path.parent / EVALUATION_FILE).write_text(json.dumps(verdict) + "\n", encoding="utf-8")
    if mean_reward < min_reward:
        log(ROLE, f"FAIL: mean reward {mean_reward:.3f} is below min_reward {min_reward:.3f}")
        return 1
    log(ROLE, f"PASS: mean reward {mean_reward:.3f} >= min_reward {min_reward:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

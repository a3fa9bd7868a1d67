"""P14: GPU-hours paid / GPU-hours needed when a 100-step training stage that checkpoints every
10 steps loses its node at step 80 and is recovered by the platform's retry.

A trainer on 8 accelerators runs 100 steps of a fixed time each, saves a checkpoint every 10
steps into ``AIRO_CHECKPOINT_DIR`` and resumes from the newest one there; its first execution
stops at step 80 until the harness takes its node away (the local workspace's simulated node
loss). The platform's retry (``max_retries: 1``) then runs it again. Two sides:

- ``restart``: no checkpoint volume, what every path did before (the retry starts at step 0);
- ``checkpoint``: a checkpoint volume, so the retry resumes at step 80.

GPU-hours are counted by the ranks: each execution writes its start and end time and its
steps; an execution holds 8 accelerators for its duration. *Needed* is one execution of the
stage without a failure, measured in the same process. Every run of this script is kept in the
result file (date, commit, load, each side's figures); ``met`` is computed from all of them.
The other recovery paths (an Airflow clear, a Dagster re-execution, a run retry) use the same
folder and are tested (tests/airflow/test_airflow_checkpoints.py,
tests/dagster/test_dagster_checkpoints.py) but not timed here.

    python -m benchmarks.p14_recovery [--quick]
"""

from __future__ import annotations

import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import LOAD_BEFORE, RESULTS, fmt, git_commit, parser_for, write_result

ACCELERATORS = 8
KILL_AT = 80
TARGET = {"checkpoint_ratio_max": 1.1}

TRAINER = """\
out="{out}"
start=0
folder="${{AIRO_CHECKPOINT_DIR:-}}"
if [ -n "$folder" ] && [ -f "$folder/step" ]; then start=$(cat "$folder/step"); fi
echo "begin $(date +%s.%N) $start" >> "$out/times"
step=$start
while [ "$step" -lt 100 ]; do
  step=$((step + 1))
  sleep {step_s}
  echo "$step" >> "$out/steps"
  if [ -n "$folder" ] && [ $((step % 10)) = 0 ]; then
    echo "$step" > "$folder/step.tmp" && mv "$folder/step.tmp" "$folder/step"
  fi
  if [ "$step" = {kill_at} ] && [ -n "{kill}" ] && [ ! -e "$out/killed" ]; then
    echo "end $(date +%s.%N)" >> "$out/times"
    touch "$out/at_kill"
    while true; do sleep 0.05; done
  fi
done
echo "end $(date +%s.%N)" >> "$out/times"
"""


def _workload(out: Path, step_s: float, kill: bool) -> Any:
    from air_runtime import load_workload

    return load_workload(
        {
            "experiment_name": "p14",
            "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": ACCELERATORS},
            "max_retries": 1,
            "command": TRAINER.format(
                out=out, step_s=step_s, kill_at=KILL_AT, kill="yes" if kill else ""
            ),
        }
    )


def _gpu_hours(out: Path) -> float:
    """Accelerators x the executions' time, from what the ranks wrote (a lost execution's
    end is the moment it reached the kill step)."""
    begins: list[float] = []
    ends: list[float] = []
    for line in (out / "times").read_text().splitlines():
        kind, stamp, *_ = line.split()
        (begins if kind == "begin" else ends).append(float(stamp))
    return ACCELERATORS * sum(e - b for b, e in zip(begins, ends, strict=True)) / 3600


def _one(workspace: Any, side: str, trial: str, step_s: float, kill: bool) -> dict[str, Any]:
    from air_runtime import AirClient
    from air_runtime._submission import Submission, SubmissionKey

    out = Path(tempfile.mkdtemp(prefix=f"p14-{side}-"))
    volume = "/Volumes/main/bench/checkpoints" if side == "checkpoint" else None
    key = SubmissionKey("airflow", "bench", "p14", trial, side)
    with AirClient(workspace.host, workspace.token) as client:
        run = Submission(key, checkpoint_volume=volume).submit(
            client, _workload(out, step_s, kill), 0
        )
        if kill:
            deadline = time.monotonic() + 600
            while not (out / "at_kill").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {run.run_id} never reached step {KILL_AT}")
                time.sleep(0.02)
            (out / "killed").touch()
            workspace.admin.lose_node(run.run_id, 0)
        state = client.wait(run.run_id, timeout=600, poll_interval=0.5)
    if state.result_state != "SUCCESS":
        raise RuntimeError(f"run {run.run_id} ended {state.describe()}")
    starts = [int(line.split()[2]) for line in (out / "times").read_text().splitlines()
              if line.startswith("begin")]  # fmt: skip
    return {
        "gpu_hours": _gpu_hours(out),
        "steps": len((out / "steps").read_text().splitlines()),
        "starts": starts,
        "attempts": len(state.task_attempts()),
    }


def measure(quick: bool) -> dict[str, Any]:
    from air_runtime.local import start_local_workspace

    step_s = 0.02 if quick else 0.1
    with tempfile.TemporaryDirectory(prefix="p14-workspace-") as data:
        workspace = start_local_workspace(data_dir=Path(data), retry_interval_s=0.2)
        try:
            needed = _one(workspace, "needed", "clean", step_s, kill=False)
            sides = {
                side: _one(workspace, side, "trial", step_s, kill=True)
                for side in ("restart", "checkpoint")
            }
        finally:
            workspace.stop()
    for figures in sides.values():
        figures["ratio"] = figures["gpu_hours"] / needed["gpu_hours"]
        figures["steps_ratio"] = figures["steps"] / 100
    return {"step_seconds": step_s, "quick": quick, "needed": needed, **sides}


def main(argv: list[str] | None = None) -> int:
    args = parser_for(__doc__).parse_args(argv)
    run = measure(quick=args.quick)
    run.update(
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        commit=git_commit(),
        load_before=LOAD_BEFORE,
    )
    path = RESULTS / "p14.json"
    runs = json.loads(path.read_text()).get("runs", []) if path.exists() else []
    runs.append(run)
    ratios = [r["checkpoint"]["ratio"] for r in runs]
    write_result(
        "P14",
        {
            "scenario": "100-step stage, checkpoint every 10 steps, node lost at step 80, "
            "recovered by the platform's retry (local workspace)",
            "target": TARGET,
            "runs": runs,
            "worst_checkpoint_ratio": max(ratios),
            "met": max(ratios) <= TARGET["checkpoint_ratio_max"],
            "met_rule": "met when every kept run's checkpoint ratio is within the target",
        },
    )
    for side in ("restart", "checkpoint"):
        figures = run[side]
        print(
            f"{side}: {fmt(figures['ratio'])}x GPU-hours, {figures['steps']} steps for 100, "
            f"starts {figures['starts']}"
        )
    print(f"P14 met over {len(runs)} runs: {max(ratios) <= TARGET['checkpoint_ratio_max']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

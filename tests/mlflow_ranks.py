"""A rank command that logs training progress to its MLflow run with the real ``mlflow``
client, as HuggingFace Trainer does: ``max_steps``, then the ``epoch`` metric at steps 10..100,
one second apart by their timestamps (10 steps/s: 900 steps left -> 90 s, 10%); then it holds
until a file exists, so a test sees the progress while the run still runs."""

from __future__ import annotations

from pathlib import Path

# What each surface shows for it (eta.go): 10%, 90 s left.
PERCENT, REMAINING_S = 10, 90

_COMMAND = """\
python - <<'PY'
import os, pathlib, time
from mlflow import MlflowClient
run_id = os.environ["MLFLOW_RUN_ID"]
client = MlflowClient()
client.log_param(run_id, "max_steps", 1000)
start = int(time.time() * 1000) - 20_000
for i, step in enumerate(range(10, 101, 10)):
    client.log_metric(run_id, "epoch", step / 1000, timestamp=start + 1000 * i, step=step)
print("logged progress", flush=True)
while not pathlib.Path("{release}").exists():
    time.sleep(0.05)
PY
"""


def progress_command(release: Path) -> str:
    """The rank's command; it ends once ``release`` exists."""
    return _COMMAND.format(release=release)

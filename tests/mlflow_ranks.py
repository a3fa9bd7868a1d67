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


# A trial of about 65 s as a sweep runs them: 12 epochs of 5 s, each logged when it ends as
# the ``epoch`` metric at MLflow step = the epoch (under the CLI's step-10 rule until 50 s).
EPOCHS, EPOCH_S = 12, 5

_EPOCHS_COMMAND = f"""\
python - <<'PY'
import os, time
from mlflow import MlflowClient
run_id = os.environ["MLFLOW_RUN_ID"]
client = MlflowClient()
client.log_param(run_id, "num_train_epochs", {EPOCHS})
start = time.time()
for epoch in range(1, {EPOCHS} + 1):
    time.sleep(max(0.0, start + {EPOCH_S} * epoch - time.time()))
    client.log_metric(run_id, "epoch", float(epoch), step=epoch)
    print("epoch", epoch, flush=True)
PY
"""


def epochs_command() -> str:
    """The rank's command: a trial that logs its total and each epoch as it ends."""
    return _EPOCHS_COMMAND

"""Where a logical task keeps its checkpoints, so that a failure inside a stage costs the
steps since the last checkpoint rather than the whole stage.

A logical task is what the run name already names: the orchestrator deployment, the
pipeline (a Dag, a Dagster job), its run (an Airflow Dag run; a Dagster run's root run, so
re-executions and run retries share it), the task or asset, the map index or partition, and
the workflow stage. Each gets one folder on a Unity Catalog volume, the same for every
attempt of it: the platform's retries (the same submit body), Airflow retries and clears,
stage repairs, Dagster step retries, run retries and re-executions. Every rank finds it in
``AIRO_CHECKPOINT_DIR``; a trainer resumes from what it finds there (the folder is empty on
a first attempt). Volumes are mounted at ``/Volumes`` on the platform's nodes, and the local
workspace maps the path to its volume folders.

The folder is made (and the volume proven writable) before anything else is uploaded: a
small marker file through the Files API, the route the CLI uploads volume files by
(databricks/cli ``experimental/air/cmd/runupload.go``, ``PUT /api/2.0/fs/files/Volumes/...``,
asserted in ``runsubmit_test.go``). It names the task the folder belongs to.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from air_runtime._errors import ConfigurationError, NotFound, PlatformError

ENV_CHECKPOINT_DIR = "AIRO_CHECKPOINT_DIR"
CHECKPOINTS_FOLDER = "airo-checkpoints"
MARKER_FILE = ".airo-checkpoint.json"
_NOT_IN_FOLDER = re.compile(r"[^A-Za-z0-9_.=-]+")
_DIGEST_LENGTH = 10


def checkpoint_volume(value: str) -> str:
    """``value`` as a volume (or a folder in one): ``/Volumes/<catalog>/<schema>/<volume>``,
    no trailing slash; refused with the fix otherwise."""
    text = value.strip().rstrip("/")
    parts = PurePosixPath(text).parts
    if len(parts) < 5 or parts[:2] != ("/", "Volumes") or ".." in parts:
        raise ConfigurationError(
            f"checkpoint_volume {value!r} is not a Unity Catalog volume: use "
            "/Volumes/<catalog>/<schema>/<volume> (a folder in it is fine), e.g. "
            "/Volumes/main/ml/checkpoints"
        )
    return text


def _folder(text: str) -> str:
    return _NOT_IN_FOLDER.sub("_", text).strip("_.") or "_"


@dataclass(frozen=True, slots=True)
class CheckpointIdentity:
    """What names one logical task's checkpoints (see the module docstring)."""

    orchestrator: str
    namespace: str
    pipeline: str
    run: str
    task: str
    index: int | str | None = None
    stage: str | None = None
    epoch: str | None = None  # what a user asked to start again from (see ``Submission``)
    # The code's version (a Dagster asset's code_version, an Airflow Dag's version): new
    # code starts a new folder, since another model's checkpoints would not load.
    code_version: str | None = None

    def digest(self) -> str:
        whole: list[object] = [self.orchestrator, self.namespace, self.pipeline, self.run,
                               self.task, self.index, self.stage]  # fmt: skip
        if self.epoch is not None:
            whole.append(self.epoch)
        if self.code_version is not None:
            whole.append(["code", self.code_version])
        text = json.dumps(whole, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_DIGEST_LENGTH]

    def folder(self, volume: str) -> str:
        """``<volume>/airo-checkpoints/<pipeline>/<run>/<task>[--<index>][--<stage>]--<digest>``:
        readable, and unique whatever the cleaning of names merged (the digest is of the
        whole identity, the deployment's namespace included)."""
        leaf = "--".join(
            _folder(str(p)) for p in (self.task, self.index, self.stage) if p is not None
        )
        return "/".join(
            [
                checkpoint_volume(volume),
                CHECKPOINTS_FOLDER,
                _folder(self.pipeline),
                _folder(self.run),
                f"{leaf}--{self.digest()}",
            ]
        )

    def marker(self) -> bytes:
        return json.dumps(
            {
                "orchestrator": self.orchestrator,
                "pipeline": self.pipeline,
                "run": self.run,
                "task": self.task,
                "index": self.index,
                "stage": self.stage,
                "epoch": self.epoch,
                "code_version": self.code_version,
            },
            indent=1,
        ).encode("utf-8")


def unwritable(volume: str, folder: str, error: NotFound | PlatformError) -> ConfigurationError:
    """The error that refuses a submission whose checkpoint volume is missing or not
    writable, with the fix."""
    if isinstance(error, NotFound):
        why = "does not exist"
        fix = (
            "create it (CREATE VOLUME <catalog>.<schema>.<volume>) or point checkpoint_volume "
            "at one that exists"
        )
    else:
        why = f"cannot be written ({error})"
        fix = "grant the submitting identity WRITE VOLUME on it, or use another volume"
    return ConfigurationError(
        f"checkpoint_volume {volume} {why}: nothing was submitted. {fix[0].upper()}{fix[1:]}; "
        f"checkpoints of this task go to {folder}."
    )


# --- what a folder holds ------------------------------------------------------------------

# Resume variables every rank of a run with a checkpoint folder gets (besides the folder):
# whether an earlier run of its logical task left a checkpoint there, which one and which run.
ENV_RESUMING = "AIRO_RESUMING"
ENV_RESUME_CHECKPOINT = "AIRO_RESUME_CHECKPOINT"
ENV_RESUME_STEP = "AIRO_RESUME_STEP"
ENV_RESUME_RUN = "AIRO_RESUME_RUN"
# An empty file per run submitted into the folder (``.airo-run-<run id>``): a listing says
# which runs used it without reading a file.
RUN_RECORD_PREFIX = ".airo-run-"
# A checkpoint's step, read from its name: Hugging Face's ``checkpoint-<step>``, Lightning's
# ``step=<step>``, ``step-70``, ``ckpt_70.pt``, ``global_step70``.
_STEP_IN_NAME = re.compile(r"(?:checkpoint|ckpt|step|iter|iteration)[-_=]?(\d+)", re.IGNORECASE)
# What a trainer writes on its way to a checkpoint (renamed into place when whole).
_PARTIAL = (".tmp", ".partial", ".incomplete")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint in a task's folder: an entry (file or folder) of it."""

    folder: str
    name: str
    step: int | None = None

    @property
    def path(self) -> str:
        return f"{self.folder}/{self.name}"

    def describe(self) -> str:
        """``step 4,000`` when the name carries a step, else its name."""
        return f"step {self.step:,}" if self.step is not None else self.name

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "name": self.name, "step": self.step}


@dataclass(frozen=True, slots=True)
class FolderContents:
    """What a task's checkpoint folder holds, from one listing: whether a submission made
    it already (its marker), the runs submitted into it, and the newest checkpoint."""

    folder: str
    made: bool = False
    runs: tuple[int, ...] = ()
    newest: Checkpoint | None = None

    @classmethod
    def of(
        cls, folder: str, entries: list[dict[str, object]], before_ms: int | None = None
    ) -> FolderContents:
        """From the Files API's ``contents`` of the folder (name, is_directory,
        last_modified): the newest checkpoint is the one of the highest step when names
        carry steps, else the last modified; hidden and partial entries are not ones, nor
        (with ``before_ms``) files written after that time (a later attempt's)."""
        made = any(e.get("name") == MARKER_FILE for e in entries)
        runs = sorted(
            int(name.removeprefix(RUN_RECORD_PREFIX))
            for e in entries
            if (name := str(e.get("name") or "")).startswith(RUN_RECORD_PREFIX)
            and name.removeprefix(RUN_RECORD_PREFIX).isdigit()
        )
        candidates = []
        for entry in entries:
            name = str(entry.get("name") or "")
            if not name or name.startswith(".") or name.endswith(_PARTIAL):
                continue
            found = _STEP_IN_NAME.search(name)
            step = int(found.group(1)) if found else None
            modified = entry.get("last_modified")
            when = int(modified) if isinstance(modified, int | float) else 0
            if before_ms is not None and when > before_ms:
                continue
            candidates.append((step is not None, step or 0, when, name))
        newest = None
        if candidates:
            _, step_value, _, name = max(candidates)
            found_step = _STEP_IN_NAME.search(name)
            newest = Checkpoint(folder, name, step_value if found_step else None)
        return cls(folder, made, tuple(runs), newest)

    def environment(self) -> dict[str, str]:
        """The resume variables of a run submitted into the folder now: resuming when an
        earlier run left a checkpoint (``AIRO_RESUME_CHECKPOINT`` its name in the folder,
        ``AIRO_RESUME_STEP`` its step when its name has one, ``AIRO_RESUME_RUN`` the last
        run submitted into the folder)."""
        if self.newest is None:
            return {ENV_RESUMING: "0"}
        env = {ENV_RESUMING: "1", ENV_RESUME_CHECKPOINT: self.newest.name}
        if self.newest.step is not None:
            env[ENV_RESUME_STEP] = str(self.newest.step)
        if self.runs:
            env[ENV_RESUME_RUN] = str(self.runs[-1])
        return env

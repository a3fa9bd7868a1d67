"""The plan of one submission: everything that will be uploaded and sent, as plain data."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Literal

from air_runtime.workload import Workload


@dataclass(frozen=True)
class UploadFile:
    """One file of a launch directory (``path`` is the absolute workspace path)."""

    path: str
    content: bytes


@dataclass(frozen=True)
class CodeSnapshot:
    """The code of one task: the client packs ``root_path`` (only ``include_paths`` when
    given; the ``git_commit``/``git_branch`` revision when set) and names the archive by its
    content in ``remote_volume`` or the user's ``.air/repo_snapshots`` (see
    ``air_runtime._snapshot``); the task's ``code_source_path`` is filled in then."""

    task_key: str
    root_path: str
    base_dir: str | None = None
    include_paths: tuple[str, ...] = ()
    remote_volume: str | None = None
    git_commit: str | None = None
    git_branch: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "task_key": self.task_key,
            "root_path": self.root_path,
            "base_dir": self.base_dir,
            "include_paths": list(self.include_paths),
            "remote_volume": self.remote_volume,
            "git_commit": self.git_commit,
            "git_branch": self.git_branch,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CodeSnapshot:
        return cls(
            task_key=data["task_key"],
            root_path=data["root_path"],
            base_dir=data.get("base_dir"),
            include_paths=tuple(data.get("include_paths") or ()),
            remote_volume=data.get("remote_volume"),
            git_commit=data.get("git_commit"),
            git_branch=data.get("git_branch"),
        )


@dataclass(frozen=True)
class Stage:
    """One workload of a multi-stage run: a task of the single runs/submit."""

    task_key: str
    workload: Workload
    depends_on: tuple[str, ...] = ()
    run_if: str = "ALL_SUCCESS"
    # The orchestrator's own task for this stage (an Airflow stage's task id), when it is
    # not the one that submits: its ranks' AIRO_TASK.
    orchestrator_task: str | None = None


@dataclass(frozen=True)
class ImageRequirement:
    """A Docker image the submit needs (normal form) and how to make sure it is ready.

    ``auto``: it must already be registered and AVAILABLE. ``latest``: it is registered
    again before the submit (with the credentials secret when given) to pick up a re-pushed
    tag, and the submit waits until it is AVAILABLE.
    """

    url: str
    tag_policy: Literal["auto", "latest"] = "auto"
    credentials_scope: str | None = None
    credentials_key: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "tag_policy": self.tag_policy,
            "credentials_scope": self.credentials_scope,
            "credentials_key": self.credentials_key,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageRequirement:
        policy = data.get("tag_policy") or "auto"
        if policy != "auto" and policy != "latest":
            raise ValueError(f"unknown tag_policy {policy!r} for image {data.get('url')!r}")
        return cls(
            url=data["url"],
            tag_policy="latest" if policy == "latest" else "auto",
            credentials_scope=data.get("credentials_scope"),
            credentials_key=data.get("credentials_key"),
        )


@dataclass(frozen=True)
class SubmissionPlan:
    run_name: str
    idempotency_token: str
    home: str
    launch_dirs: dict[str, str]
    folders: tuple[str, ...]
    files: tuple[UploadFile, ...]
    code_snapshots: tuple[CodeSnapshot, ...]
    preflight_bodies: tuple[dict[str, Any], ...]
    submit_body: dict[str, Any]
    docker_images: tuple[str, ...] = ()
    permissions: tuple[dict[str, Any], ...] = ()
    usage_policy_name: str | None = None
    image_requirements: tuple[ImageRequirement, ...] = ()

    def required_images(self) -> tuple[ImageRequirement, ...]:
        """Every image of ``docker_images`` with its policy: the ``image_requirements`` entry
        for it, else ``auto`` (plans built by hand may list ``docker_images`` only)."""
        known = {r.url: r for r in self.image_requirements}
        extra = [ImageRequirement(url) for url in self.docker_images if url not in known]
        return (*self.image_requirements, *extra)

    def submit_body_with_code(self, code_source_paths: dict[str, str]) -> dict[str, Any]:
        """The submit body with each task's uploaded archive as its ``code_source_path``
        (keyed by task key), set on the ``ai_runtime_task`` as the CLI does (runsubmit.go)."""
        body = dict(self.submit_body)
        tasks = []
        for task in body.get("tasks") or []:
            path = code_source_paths.get(task.get("task_key"))
            if path is not None:
                ai_task = {**task["ai_runtime_task"], "code_source_path": path}
                task = {**task, "ai_runtime_task": ai_task}
            tasks.append(task)
        body["tasks"] = tasks
        return body

    def file(self, path: str) -> UploadFile:
        """The file whose path is ``path`` or ends with ``/<path>`` (first match)."""
        for upload in self.files:
            if upload.path == path or upload.path.endswith("/" + path):
                return upload
        raise KeyError(path)

    def _as_dict(self, files: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "run_name": self.run_name,
            "idempotency_token": self.idempotency_token,
            "home": self.home,
            "launch_dirs": dict(self.launch_dirs),
            "folders": list(self.folders),
            "files": files,
            "code_snapshots": [s.to_json() for s in self.code_snapshots],
            "preflight_bodies": list(self.preflight_bodies),
            "submit_body": self.submit_body,
            "docker_images": list(self.docker_images),
            "permissions": list(self.permissions),
            "usage_policy_name": self.usage_policy_name,
            "image_requirements": [r.to_json() for r in self.image_requirements],
        }

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (file contents as base64); ``from_json`` reverses it."""
        return self._as_dict(
            [
                {"path": f.path, "content_base64": base64.b64encode(f.content).decode("ascii")}
                for f in self.files
            ]
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubmissionPlan:
        return cls(
            run_name=data["run_name"],
            idempotency_token=data["idempotency_token"],
            home=data["home"],
            launch_dirs=dict(data["launch_dirs"]),
            folders=tuple(data["folders"]),
            files=tuple(
                UploadFile(f["path"], base64.b64decode(f["content_base64"])) for f in data["files"]
            ),
            code_snapshots=tuple(CodeSnapshot.from_json(s) for s in data["code_snapshots"]),
            preflight_bodies=tuple(data["preflight_bodies"]),
            submit_body=data["submit_body"],
            docker_images=tuple(data.get("docker_images", ())),
            permissions=tuple(data.get("permissions", ())),
            usage_policy_name=data.get("usage_policy_name"),
            image_requirements=tuple(
                ImageRequirement.from_json(r) for r in data.get("image_requirements", ())
            ),
        )

    def redacted(self) -> dict[str, Any]:
        """What ``airo plan`` prints: file contents as text. Plans hold secret references only."""
        return self._as_dict(
            [{"path": f.path, "content": f.content.decode("utf-8", "replace")} for f in self.files]
        )

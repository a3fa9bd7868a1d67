"""``containers``: rank-partitioned images, their commands and variables (docs/spec/workload.md §3)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from air_runtime.workload._check_base import Report, Section, _is_int, _short, _type_name
from air_runtime.workload._check_environment import EnvironmentRules
from air_runtime.workload._check_variables import VariableRules

CONTAINER_KEYS = ("name", "ranks", "unity_catalog_image", "command", "environment_variables")
CONTAINER_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_CONTAINER_NAME = 16
SECRET_TEMPLATE_RE = re.compile(r"^\{\{secrets/([^/{}\s]+)/([^/{}\s]+)\}\}$")
_UC_PER_CONTAINER_HINT = (
    "Docker images are not supported per container: publish the image to Unity Catalog and "
    "set unity_catalog_image: <catalog>.<schema>.<image>:<tag>"
)


class ContainerRules(Section):
    """A container's variables follow the top-level variable rules and its image the
    environment's Unity Catalog rule: both sections are handed in, not inherited."""

    def __init__(
        self, report: Report, variables: VariableRules, environment: EnvironmentRules
    ) -> None:
        super().__init__(report)
        self.variables = variables
        self.environment = environment

    def containers(self, raw: Any, nodes: int | None) -> list[dict[str, Any]] | None:
        if not isinstance(raw, list):
            self.add(
                "containers",
                f"containers must be a list, got {_type_name(raw)}",
                "write one '- name: ...' item per container",
            )
            return None
        if not raw:
            self.add("containers", "containers must not be empty", "list at least one container")
            return None
        results: list[dict[str, Any] | None] = []
        names: dict[str, int] = {}
        for i, item in enumerate(raw):
            results.append(self.container(item, i, len(raw), names))
        ok = [c for c in results if c is not None]
        if nodes is not None:
            self.rank_partition(raw, results, nodes)
        return ok if len(ok) == len(raw) else None

    def container(
        self, raw: Any, i: int, total: int, names: dict[str, int]
    ) -> dict[str, Any] | None:
        path = f"containers[{i}]"
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping, got {_type_name(raw)}",
                "give name, ranks, unity_catalog_image and command",
            )
            return None
        for key in raw:
            if key == "docker_image":
                self.add(
                    f"{path}.docker_image",
                    f"{path}.docker_image is not supported",
                    _UC_PER_CONTAINER_HINT,
                    at_key=True,
                )
            elif not isinstance(key, str) or key not in CONTAINER_KEYS:
                self.unknown_key(path, str(key), CONTAINER_KEYS)
        out: dict[str, Any] = {}
        if "name" not in raw:
            self.add(f"{path}.name", f"{path}.name is required", "give each container a short name")
        else:
            name = self.string(raw["name"], f"{path}.name")
            if name is not None:
                if not CONTAINER_NAME_RE.match(name):
                    self.add(
                        f"{path}.name",
                        f"container name {_short(name)} is invalid",
                        "use letters, digits and '_' only, starting with a letter or '_' "
                        "(no hyphens, dots or slashes: it becomes a folder name)",
                    )
                elif len(name) > MAX_CONTAINER_NAME:
                    self.add(
                        f"{path}.name",
                        f"container name {_short(name)} is {len(name)} characters, more than {MAX_CONTAINER_NAME}",
                        "use a shorter name",
                    )
                elif name in names:
                    self.add(
                        f"{path}.name",
                        f"container name {name!r} is already used by containers[{names[name]}]",
                        "give every container a unique name",
                    )
                else:
                    names[name] = i
                    out["name"] = name
        if "command" not in raw:
            self.add(
                f"{path}.command",
                f"{path}.command is required",
                "give the script this container runs",
            )
        else:
            command = self.command(raw["command"], f"{path}.command")
            if command is not None:
                out["command"] = command
        if "unity_catalog_image" not in raw:
            self.add(
                f"{path}.unity_catalog_image",
                f"{path}.unity_catalog_image is required",
                "give <catalog>.<schema>.<image>:<tag>"
                + ("; " + _UC_PER_CONTAINER_HINT if "docker_image" in raw else ""),
            )
        else:
            uc = self.environment.uc_image(
                raw["unity_catalog_image"], f"{path}.unity_catalog_image"
            )
            if uc is not None:
                out["unity_catalog_image"] = uc
        if "ranks" not in raw or raw["ranks"] is None:
            if total > 1:
                self.add(
                    f"{path}.ranks",
                    f"{path}.ranks is required when there is more than one container",
                    "list the node ranks this container runs on, e.g. ranks: [0]",
                )
        else:
            ranks = raw["ranks"]
            if _is_int(ranks):
                ranks = [ranks]
            if not isinstance(ranks, list) or not all(_is_int(r) for r in ranks):
                self.add(
                    f"{path}.ranks",
                    f"{path}.ranks must be a list of node ranks, got {_type_name(raw['ranks'])}",
                    "e.g. ranks: [0, 1]",
                )
            elif not ranks:
                self.add(f"{path}.ranks", f"{path}.ranks must not be empty", "e.g. ranks: [0]")
        if "environment_variables" in raw:
            env = self.container_env(raw["environment_variables"], f"{path}.environment_variables")
            if env is not None:
                out.update(env)
        required = ("name", "command", "unity_catalog_image")
        return out if all(k in out for k in required) else None

    def container_env(self, raw: Any, path: str) -> dict[str, Any] | None:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping with variables, got {_type_name(raw)}",
                "write environment_variables: {variables: {NAME: value}}",
            )
            return None
        for key in raw:
            if key == "files":
                # The CLI takes an empty list (or nothing) and refuses files to load.
                if raw["files"] not in (None, []):
                    self.add(
                        f"{path}.files",
                        f"{path}.files must be empty: environment files are not supported",
                        "put the variables under environment_variables.variables, or write "
                        "files: []",
                        at_key=True,
                    )
            elif key != "variables":
                self.unknown_key(path, str(key), ("files", "variables"))
        variables = self.variables.env_variables(raw.get("variables", {}), f"{path}.variables")
        plain: dict[str, str] = {}
        secrets: dict[str, dict[str, str]] = {}
        for name, value in variables.items():
            if value.startswith("{{secrets/"):
                match = SECRET_TEMPLATE_RE.match(value)
                if match is None:
                    self.add(
                        f"{path}.variables.{name}",
                        f"malformed secret reference {_short(value)}",
                        "write {{secrets/<scope>/<key>}}",
                    )
                else:
                    secrets[name] = {"scope": match.group(1), "key": match.group(2)}
            else:
                plain[name] = value
        return {"env_variables": plain, "secrets": secrets}

    def rank_partition(
        self, raw: list[Any], results: list[dict[str, Any] | None], nodes: int
    ) -> None:
        owners: dict[int, list[str]] = {}

        def label(i: int) -> str:
            item = raw[i]
            name = item.get("name") if isinstance(item, dict) else None
            return f"{name!r}" if isinstance(name, str) else f"containers[{i}]"

        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                return
            ranks = item.get("ranks")
            if _is_int(ranks):
                ranks = [ranks]
            if ranks is None and len(raw) == 1:
                ranks = list(range(nodes))
            if not isinstance(ranks, list) or not all(_is_int(r) for r in ranks):
                return
            seen: dict[int, None] = {}  # in the order written (runsubmit.go sends them so)
            for rank in ranks:
                if rank < 0 or rank >= nodes:
                    self.add(
                        f"containers[{i}].ranks",
                        f"rank {rank} of container {label(i)} is out of range: {nodes} node(s) "
                        f"have ranks 0..{nodes - 1}",
                        "ranks are node ranks (not GPU ranks); use 0.."
                        f"{nodes - 1} or raise compute.num_accelerators",
                    )
                    continue
                if rank in seen:
                    self.add(
                        f"containers[{i}].ranks",
                        f"rank {rank} is listed twice in container {label(i)}",
                        "list each rank once",
                    )
                    continue
                seen[rank] = None
                if rank in owners:
                    self.add(
                        f"containers[{i}].ranks",
                        f"rank {rank} is assigned to containers {' and '.join([*owners[rank], label(i)])}",
                        "assign every rank to exactly one container",
                    )
                owners.setdefault(rank, []).append(label(i))
            if results[i] is not None:
                results[i]["ranks"] = list(seen)  # type: ignore[index]
        containers = ", ".join(label(i) for i in range(len(raw)))
        for first, last in _spans(r for r in range(nodes) if r not in owners):
            if last - first < 2:
                for rank in range(first, last + 1):
                    self.add(
                        "containers",
                        f"rank {rank} is not assigned to any container (containers: {containers})",
                        f"add {rank} to the ranks of one container",
                    )
            else:  # one problem for a run of ranks, not one per rank
                self.add(
                    "containers",
                    f"ranks {first}..{last} are not assigned to any container "
                    f"(containers: {containers})",
                    f"add {first}..{last} to the ranks of the containers",
                )


def _spans(numbers: Iterable[int]) -> Iterator[tuple[int, int]]:
    """(first, last) of each run of consecutive numbers of an ascending sequence."""
    first = last = None
    for n in numbers:
        if last is not None and n == last + 1:
            last = n
            continue
        if first is not None and last is not None:
            yield first, last
        first = last = n
    if first is not None and last is not None:
        yield first, last

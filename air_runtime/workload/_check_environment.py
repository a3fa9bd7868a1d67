"""``environment``: runtime version, dependencies, Docker and Unity Catalog images (docs/spec/workload.md §2)."""

from __future__ import annotations

import re
from typing import Any

from air_runtime.workload._check_base import Section, _is_int, _short, _type_name
from air_runtime.workload._models import default_environment_version

ENVIRONMENT_KEYS = ("version", "dependencies", "docker_image", "unity_catalog_image")
DOCKER_IMAGE_KEYS = ("url", "tag_policy", "credentials_scope", "credentials_key")
VERSION_RE = re.compile(r"^databricks_ai_v(\d+)$")
# runconfig.go unityCatalogImageRe: structural only (no '.', ':' or whitespace inside a part);
# whether the image exists is the workspace's to say.
UC_IMAGE_RE = re.compile(r"^[^.:\s]+\.[^.:\s]+\.[^.:\s]+:[^:\s]+$")


class EnvironmentRules(Section):
    def environment(self, raw: Any, has_containers: bool) -> dict[str, Any] | None:
        if raw is None:
            return None
        data = self.mapping(raw, "environment", ENVIRONMENT_KEYS, "environment")
        if data is None:
            return None
        out: dict[str, Any] = {}
        if "version" in data:
            version = self.version(data["version"])
            if version is not None:
                out["version"] = version
        if "dependencies" in data:
            deps = data["dependencies"]
            if isinstance(deps, str):
                self.add(
                    "environment.dependencies",
                    "environment.dependencies must be a list of pip requirements, got a string",
                    f"write it as a list: dependencies: [{_short(deps.strip(), 40)}] or one "
                    "'- requirement' line per package",
                )
            elif not isinstance(deps, list):
                self.add(
                    "environment.dependencies",
                    f"environment.dependencies must be a list, got {_type_name(deps)}",
                    "write one '- requirement' line per package",
                )
            else:
                ok = []
                for i, dep in enumerate(deps):
                    text = self.string(dep, f"environment.dependencies[{i}]")
                    if text is not None:
                        ok.append(text.strip())
                if len(ok) == len(deps):
                    out["dependencies"] = ok
        if "docker_image" in data:
            image = self.docker_image(data["docker_image"])
            if image is not None:
                out["docker_image"] = image
        if "unity_catalog_image" in data:
            uc = self.uc_image(data["unity_catalog_image"], "environment.unity_catalog_image")
            if uc is not None:
                out["unity_catalog_image"] = uc

        # runconfig.go: an image pins the whole runtime, so dependencies (even []) and
        # version are refused beside it.
        managed = [f"environment.{k}" for k in ("version", "dependencies") if k in data]
        for image_key in ("docker_image", "unity_catalog_image"):
            if image_key in data and managed:
                self.add(
                    f"environment.{image_key}",
                    f"environment.{image_key} cannot be combined with {' and '.join(managed)}",
                    "install extra packages in the image (Dockerfile) instead and remove "
                    + " and ".join(managed),
                )
        if "docker_image" in data and "unity_catalog_image" in data:
            self.add(
                "environment.unity_catalog_image",
                "environment.docker_image and environment.unity_catalog_image are mutually exclusive",
                "keep only one of them",
            )
        if has_containers:
            for image_key in ("docker_image", "unity_catalog_image"):
                if image_key in data:
                    self.add(
                        f"environment.{image_key}",
                        f"environment.{image_key} is not allowed together with containers",
                        "set unity_catalog_image on each container instead",
                    )
        if "version" not in out and not any(
            k in data for k in ("docker_image", "unity_catalog_image")
        ):
            out.setdefault("version", default_environment_version())
        return out

    def version(self, value: Any) -> str | None:
        """Digits (sent as written: "05" stays "05") or ``databricks_ai_v<N>`` with N >= 5,
        any case (runconfig_load.go validateRuntimeVersion)."""
        path = "environment.version"
        hint = "use a number such as 6 or the form databricks_ai_v<N> with N >= 5"
        if _is_int(value):
            if value < 0:
                self.add(path, f"{path} must be an integer, got {value}", hint)
                return None
            return str(value)
        if not isinstance(value, str):
            self.add(path, f"{path} must be a number or a string, got {_type_name(value)}", hint)
            return None
        text = value.strip().lower()
        if text.isdigit() and text.isascii():
            return text
        match = VERSION_RE.match(text)
        if match and text.isascii():
            if int(match.group(1)) < 5:
                self.add(
                    path,
                    f"{path} {_short(value)} is too old: databricks_ai_v<N> needs N >= 5 "
                    "(AI Runtime version 5 or higher)",
                    hint,
                )
                return None
            return text  # the digits as written, lower-cased (databricks_ai_v05 stays)
        self.add(
            path,
            f"unsupported client image version {_short(value)}: version must be an integer, "
            "optionally prefixed with databricks_ai_v",
            hint,
        )
        return None

    def docker_image(self, raw: Any) -> dict[str, Any] | None:
        path = "environment.docker_image"
        if isinstance(raw, str):
            self.add(
                path,
                f"{path} must be a mapping with url, got a string",
                f"write docker_image: {{url: {raw.strip()}}}",
            )
            return None
        data = self.mapping(raw, path, DOCKER_IMAGE_KEYS, "docker_image")
        if data is None:
            return None
        out: dict[str, Any] = {}
        if "url" not in data:
            self.add(f"{path}.url", f"{path}.url is required", "give e.g. url: myorg/repo:tag")
        else:
            url = self.string(data["url"], f"{path}.url")
            if url is not None:
                from air_runtime._docker_ref import DockerRefError, normalize_docker_ref

                try:
                    out["url"] = normalize_docker_ref(url)
                except DockerRefError as exc:
                    self.add(f"{path}.url", exc.message, exc.hint)
        policy = "auto"
        if "tag_policy" in data:
            text = self.string(data["tag_policy"], f"{path}.tag_policy")
            if text is not None:
                if text.lower() in ("auto", "latest"):
                    policy = text.lower()
                    out["tag_policy"] = policy
                else:
                    self.add(
                        f"{path}.tag_policy",
                        f"unknown {path}.tag_policy {_short(text)}",
                        "use auto or latest",
                    )
        creds = [k for k in ("credentials_scope", "credentials_key") if k in data]
        for key in creds:
            text = self.string(data[key], f"{path}.{key}")
            if text is not None:
                out[key] = text
        if len(creds) == 1:
            missing = "credentials_key" if creds[0] == "credentials_scope" else "credentials_scope"
            self.add(
                f"{path}.{creds[0]}",
                f"{path}.{creds[0]} requires {path}.{missing}",
                "give credentials_scope and credentials_key together",
            )
        elif creds and policy != "latest":
            self.add(
                f"{path}.credentials_scope",
                f"{path}.credentials_scope/credentials_key are only used with tag_policy: latest",
                "add tag_policy: latest, or register the image once and remove the credentials",
            )
        return out if "url" in out else None

    def uc_image(self, value: Any, path: str) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        if not UC_IMAGE_RE.match(text):
            self.add(
                path,
                f"{path} must be in the format '<catalog>.<schema>.<image>:<tag>', got "
                f"{_short(text)}",
                "e.g. main.rl.vllm:0.20.0 (no '.', ':' or spaces inside a part)",
            )
            return None
        return text

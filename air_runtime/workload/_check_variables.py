"""Plain environment variables and secret references (docs/spec/workload.md §1, §3)."""

from __future__ import annotations

from typing import Any

from air_runtime.platform import ENV_NAME_RE
from air_runtime.workload._check_base import Section, _short, _type_name, scalar_text
from air_runtime.workload._yaml import child_path


class VariableRules(Section):
    def env_variables(self, raw: Any, path: str) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping of NAME: value, got {_type_name(raw)}",
                "write one 'NAME: value' line per variable",
            )
            return {}
        out: dict[str, str] = {}
        for name, value in raw.items():
            sub = child_path(path, name)
            if self.env_name(name, sub):
                text = scalar_text(value)
                if text is None:
                    self.add(
                        sub,
                        f"{sub} must be a single value, got {_type_name(value)}",
                        "quote the value as a string",
                    )
                else:
                    out[str(name)] = text
        return out

    def env_name(self, name: Any, path: str) -> bool:
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            self.add(
                path,
                f"environment variable name {_short(name)} is invalid",
                "names start with a letter or '_' and contain only letters, digits and '_'",
                at_key=True,
            )
            return False
        return True

    def secrets(self, raw: Any, path: str) -> dict[str, dict[str, str]]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add(
                path,
                f"{path} must be a mapping of NAME: scope/key, got {_type_name(raw)}",
                "write one 'NAME: scope/key' line per secret",
            )
            return {}
        out: dict[str, dict[str, str]] = {}
        for name, value in raw.items():
            sub = child_path(path, name)
            if not self.env_name(name, sub):
                continue
            parts = value.split("/") if isinstance(value, str) else []
            if len(parts) != 2 or not all(p.strip() for p in parts) or value != value.strip():
                self.add(
                    sub,
                    f"{sub} must be 'scope/key' with exactly one '/', got {_type_name(value)}",
                    "e.g. HF_TOKEN: research/hf_token",
                )
                continue
            out[str(name)] = {"scope": parts[0], "key": parts[1]}
        return out

"""MkDocs hooks of the documentation site.

- The `airo` command reference is generated from the command line's own definition
  (``air_runtime.cli.build_parser``, argparse) where a page holds ``<!-- airo-commands -->``,
  so it cannot drift from what ``airo --help`` says.
- The ``[air]`` options of the Airflow provider are generated from its provider info
  (``airflow_air.get_provider_info``) where a page holds ``<!-- air-config-options -->``.
- The fields of a configurable class (a Dagster resource) are a table generated from its
  pydantic fields (name, type, default, description) where a page holds
  ``<!-- config-fields: module.Class -->``: mkdocstrings shows no undocumented attribute.
- The committed benchmark plots (``benchmarks/results/*.png``) are served under
  ``benchmarks/``, so the pages show the figures the results hold, never copies of them.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path
from typing import Any, get_args

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
AIRO_MARKER = "<!-- airo-commands -->"
# `<!-- more-public-names: PACKAGE -->`: every name of PACKAGE.__all__ the page does not
# already name, so a name added to the package is in the reference without an edit here.
MORE_NAMES = re.compile(r"<!-- more-public-names: ([\w.]+) -->")
CONFIG_MARKER = "<!-- air-config-options -->"
FIELDS = re.compile(r"<!-- config-fields: ([\w.]+) -->")

for folder in (ROOT, ROOT / "providers"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def on_files(files: Files, config: Any) -> Files:
    for plot in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{plot.name}", abs_src_path=str(plot)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if AIRO_MARKER in markdown:
        markdown = markdown.replace(AIRO_MARKER, airo_reference())
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, air_config_reference())
    markdown = FIELDS.sub(lambda match: config_fields(match.group(1)), markdown)
    return MORE_NAMES.sub(lambda match: more_public_names(match.group(1), markdown), markdown)


def config_fields(path: str) -> str:
    """A table of the pydantic fields of ``module.Class``, from the fields themselves."""
    module, name = path.rsplit(".", 1)
    model = getattr(importlib.import_module(module), name)
    rows = ["| field | type | default | what it is |", "|---|---|---|---|"]
    for field_name, field in model.model_fields.items():
        annotation = field.annotation
        plain = getattr(annotation, "__name__", None) if not get_args(annotation) else None
        kind = plain or str(annotation)
        kind = kind.replace("typing.", "").replace("NoneType", "None")
        if field.default_factory is not None:
            default = "(empty)"
        else:
            default = "required" if field.is_required() else repr(field.default)
        rows.append(
            f"| `{field_name}` | `{_cell(kind)}` | `{_cell(default)}` | "
            f"{_cell(field.description or '')} |"
        )
    return "\n".join(rows)


def more_public_names(package: str, markdown: str) -> str:
    named = {path.rsplit(".", 1)[-1] for path in re.findall(r"^::: ([\w.]+)", markdown, re.M)}
    names = sorted(set(importlib.import_module(package).__all__) - named)
    if not names:
        return f"Every name `{package}` exports is on this page."
    return "\n\n".join(f"::: {package}.{name}" for name in names)


def _prose(text: str) -> str:
    """Help text as Markdown: `<data dir>` is a placeholder, not an HTML tag."""
    return " ".join(text.split()).replace("<", "&lt;").replace(">", "&gt;")


def _cell(text: str) -> str:
    return _prose(text).replace("|", "\\|")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
            name = ", ".join(f"`{option}{metavar}`" for option in action.option_strings)
        else:
            name = f"`{action.metavar or action.dest}`"
            if action.nargs in ("*", "+"):
                name += " ..."
        details = _cell(action.help or "")
        if action.choices and not isinstance(action.choices, dict):
            details += f" (one of: {', '.join(f'`{c}`' for c in action.choices)})"
        shows_default = action.default not in (None, False, [], argparse.SUPPRESS)
        if shows_default and action.nargs != 0 and "default" not in details:
            details += f" (default `{action.default}`)"
        rows.append(f"| {name} | {details} |")
    return rows


def _command_section(path: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{path}`", ""]
    if summary:
        lines += [_prose(summary[0].upper() + summary[1:]) + ".", ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    if parser.description and parser.description != summary:
        lines += [_prose(parser.description), ""]
    rows = _argument_rows(parser)
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    if parser.epilog:
        lines += [_prose(parser.epilog), ""]
    for name, help_text, sub in _subcommands(parser):
        lines += _command_section(f"{path} {name}", help_text, sub)
    return lines


def airo_reference() -> str:
    import os

    from air_runtime.cli import build_parser

    # argparse wraps usage lines to the terminal's width, and defaults such as the data
    # folder come from the environment: one width and a home written as ~, so the page is
    # the same wherever it is built.
    saved = {name: os.environ.get(name) for name in ("COLUMNS", "XDG_DATA_HOME")}
    os.environ["COLUMNS"] = "80"
    os.environ["XDG_DATA_HOME"] = "~/.local/share"
    try:
        parser = build_parser()
        lines = []
        if parser.epilog:
            lines += [_prose(parser.epilog[0].upper() + parser.epilog[1:]) + ".", ""]
        for name, help_text, sub in _subcommands(parser):
            lines += _command_section(f"airo {name}", help_text, sub)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return "\n".join(lines)


def air_config_reference() -> str:
    from airflow_air.get_provider_info import get_provider_info

    options = get_provider_info()["config"]["air"]["options"]
    lines = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for name, option in options.items():
        default = option.get("default")
        shown = "(computed)" if default is None else f"`{default}`"
        lines.append(
            f"| `{name}` | {option.get('type', '')} | {shown} | {_cell(option['description'])} |"
        )
    return "\n".join(lines)

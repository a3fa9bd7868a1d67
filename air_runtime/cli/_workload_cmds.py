"""``airo validate``, ``airo plan`` and ``airo schema``: everything that needs no workspace."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from air_runtime._errors import ConfigurationError, WorkloadError
from air_runtime._snapshot import resolve_snapshot
from air_runtime._templates import has_template_placeholders, render_workload_sample
from air_runtime.plan import build_plan
from air_runtime.workload import lint_workload, load_workload, workload_json_schema


def register(subparsers: Any) -> None:
    validate = subparsers.add_parser(
        "validate", help="check workload YAML files and list every problem"
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted path override applied before validation (repeatable)",
    )
    validate.add_argument(
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a value for the Jinja sample context of templated workloads, dotted "
        "(params.gpus=16; repeatable)",
    )
    validate.add_argument("--json", action="store_true", help="print the result as JSON")
    validate.set_defaults(func=_validate)

    plan = subparsers.add_parser(
        "plan", help="show the files and request bodies a submit would send"
    )
    plan.add_argument("file", metavar="FILE")
    plan.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted path override applied before validation (repeatable)",
    )
    plan.add_argument(
        "--user", default="user@example.com", help="workspace user name (for the home folder)"
    )
    plan.add_argument(
        "--idempotency-token",
        default=None,
        help="token to plan with (default: the workload's or random)",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=_plan)

    schema = subparsers.add_parser("schema", help="print the JSON Schema of the workload YAML")
    schema.set_defaults(func=_schema)


def _sample_context(entries: list[str]) -> dict[str, Any]:
    """``--context a.b=VALUE`` entries as nested mappings (values are YAML scalars)."""
    import yaml

    context: dict[str, Any] = {}
    for entry in entries:
        key, _, text = entry.partition("=")
        *parents, name = key.strip().split(".")
        target = context
        for parent in parents:
            target = target.setdefault(parent, {})
        try:
            target[name] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            target[name] = text
    return context


def _load_file(path: str, overrides: list[str], context: dict[str, Any]) -> Any:
    """Load a workload file; one holding Jinja placeholders is rendered with the sample
    context first (Airflow renders it when the task runs)."""
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return load_workload(path, overrides or None)  # reports the problem with the file
    if not has_template_placeholders(text):
        return load_workload(path, overrides or None)
    rendered = render_workload_sample(text, context, source_name=path)
    try:
        return load_workload(
            rendered,
            overrides or None,
            base_dir=str(Path(path).resolve().parent),
            source_name=path,
        )
    except WorkloadError as exc:
        lines = text.splitlines()
        templated = [
            p.line is not None
            and p.override is None
            and p.line <= len(lines)
            and has_template_placeholders(lines[p.line - 1])
            for p in exc.problems
        ]
        if not any(templated):
            raise
        note = "this line holds a Jinja placeholder rendered with a sample value; give its value with --context KEY=VALUE"
        problems = [
            dataclasses.replace(p, hint=f"{p.hint}; {note}" if p.hint else note) if t else p
            for p, t in zip(exc.problems, templated, strict=True)
        ]
        raise WorkloadError(problems, exc.source) from None


def _validate(args: argparse.Namespace) -> int:
    results = []
    context = _sample_context(args.context)
    for path in args.files:
        try:
            workload = _load_file(path, args.override, context)
        except WorkloadError as exc:
            results.append(
                {
                    "file": path,
                    "valid": False,
                    "problems": [p.to_dict() for p in exc.problems],
                    "warnings": [],
                    "_text": [str(p) for p in exc.problems],
                }
            )
        else:
            results.append(
                {
                    "file": path,
                    "valid": True,
                    "problems": [],
                    "warnings": lint_workload(workload),
                    "_text": [],
                }
            )
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "_text"} for r in results], indent=2))
    else:
        for result in results:
            if result["valid"]:
                print(f"{result['file']}: OK")
            else:
                print(f"{result['file']}: {len(result['problems'])} problem(s)")
                for line in result["_text"]:
                    print(f"  - {line}")
            for warning in result["warnings"]:
                print(f"  warning: {warning}")
    return 0 if all(r["valid"] for r in results) else 1


def _plan(args: argparse.Namespace) -> int:
    try:
        workload = load_workload(args.file, args.override or None)
        plan = build_plan(workload, user_name=args.user, idempotency_token=args.idempotency_token)
    except WorkloadError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    shown = plan.redacted()
    if args.json:
        print(json.dumps(shown, indent=2))
        return 0
    print(f"run name:          {plan.run_name}")
    print(f"idempotency token: {plan.idempotency_token}")
    for key, folder in plan.launch_dirs.items():
        print(f"launch dir ({key}): {folder}")
    for snapshot in plan.code_snapshots:
        include = f" (only {', '.join(snapshot.include_paths)})" if snapshot.include_paths else ""
        try:
            packed = resolve_snapshot(snapshot, plan.home)
        except ConfigurationError as error:
            print(f"code snapshot:     {snapshot.root_path}{include}: {error}")
            continue
        what = f"commit {packed.commit}" if packed.commit else "working tree"
        print(f"code snapshot:     {packed.root}{include} ({what}) -> {packed.remote_path}")
    for image in plan.required_images():
        when = (
            "re-registered before the run" if image.tag_policy == "latest" else "must be registered"
        )
        print(f"docker image:      {image.url} ({when})")
    for warning in lint_workload(workload):
        print(f"warning: {warning}")
    print("\nfiles:")
    for entry in shown["files"]:
        print(f"--- {entry['path']}")
        print(entry["content"], end="" if entry["content"].endswith("\n") else "\n")
    print("\nPOST /api/2.0/ai-training/config:validate")
    for body in plan.preflight_bodies:
        print(json.dumps(body, indent=2))
    print("\nPOST /api/2.2/jobs/runs/submit")
    print(json.dumps(plan.submit_body, indent=2))
    if plan.permissions:
        print("\nPATCH /api/2.0/permissions/jobs/<job_id> (after submit)")
        print(json.dumps({"access_control_list": list(plan.permissions)}, indent=2))
    return 0


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(workload_json_schema(), indent=2))
    return 0

"""R4 bad input: generated (hypothesis) and hostile workloads.

0 crashes: ``load_workload`` raises only ``WorkloadError``, whose problems are located (a
line, except the whole-document size limit) and which names the file it came from; a
workload that loads must also plan. Hostile inputs also go through the client path (``airo
run``) and the operator path (a real Airflow task): nothing is uploaded or submitted
(the workspace's counters of file and submit requests stay at zero).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import FULL, SEED, rng_for, trials
from helpers import reliability_dag
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from air_runtime import build_plan, load_workload
from air_runtime._errors import WorkloadError

pytestmark = [pytest.mark.row("R4"), pytest.mark.timeout(1200)]

MIB = 1024 * 1024
# Requests that upload or submit something: none may reach the workspace.
WRITES = (
    "workspace/mkdirs",
    "workspace/import",
    "workspace-files/import-file",
    "fs/files",
    "fs/directories",
    "jobs/runs/submit",
    "secrets/put",
)


def _document_level(problem: Any) -> bool:
    """Problems of the whole document (its size, no content at all) have no line."""
    return problem.path == "" and (
        "1 MiB" in problem.message or problem.message == "the workload is empty"
    )


def _check_error(error: WorkloadError, source: str | None) -> list[str]:
    """What is wrong with a WorkloadError (empty when it is a good one)."""
    wrong = []
    if not error.problems:
        wrong.append("no problems listed")
    for problem in error.problems:
        if problem.line is None and not _document_level(problem):
            wrong.append(f"problem without a line: {problem}")
    if source is not None and error.source != source:
        wrong.append(f"error source {error.source!r}, expected {source!r}")
    return wrong


def _load(source: Any, expect_source: str | None = None) -> tuple[str, list[str]]:
    """``("ok" | "invalid" | "crash", complaints)``; a valid workload is planned too."""
    try:
        loaded = load_workload(source)
    except WorkloadError as error:
        return "invalid", _check_error(error, expect_source)
    except Exception as exc:
        return "crash", [f"{type(exc).__name__}: {exc}"]
    try:
        build_plan(loaded, user_name="someone@example.com", idempotency_token="r4")
    except Exception as exc:
        return "crash", [f"build_plan: {type(exc).__name__}: {exc}"]
    return "ok", []


# --- generated workloads -----------------------------------------------------------------

names = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
    st.sampled_from(["../x", "a/b", "", ".", "..", "x y", "ü", "a" * 300, "-"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, strategy, anything)


container = st.fixed_dictionaries(
    {
        "name": maybe(names),
        "command": maybe(st.sampled_from(["serve", "train", "", "x\n" * 1200])),
        "unity_catalog_image": maybe(st.sampled_from(["main.rl.vllm:0.20.0", "bad"])),
    },
    optional={
        "ranks": maybe(st.lists(st.integers(-3, 70), max_size=6)),
        "environment_variables": maybe(
            st.fixed_dictionaries({"variables": st.dictionaries(names, scalars, max_size=3)})
        ),
        "docker_image": maybe(st.fixed_dictionaries({"url": st.sampled_from(["a/b", "::", ""])})),
    },
)
workload_dicts = st.fixed_dictionaries(
    {
        "experiment_name": maybe(names),
        "compute": maybe(
            st.fixed_dictionaries(
                {
                    "accelerator_type": maybe(st.sampled_from(["GPU_1xA10", "GPU_8xH100", "TPU"])),
                    "num_accelerators": maybe(st.sampled_from([1, 2, 8, 16, 0, -1, 10**9])),
                }
            )
        ),
    },
    optional={
        "command": maybe(st.text(max_size=40)),
        "containers": maybe(st.lists(container, max_size=4)),
        "env_variables": maybe(st.dictionaries(names, scalars, max_size=3)),
        "parameters": anything,
        "max_retries": maybe(st.integers(-2, 20)),
        "timeout_minutes": maybe(st.integers(-5, 10**6)),
        "code_source": maybe(
            st.fixed_dictionaries({"root_path": st.sampled_from(["..", "/", "."])})
        ),
        "permissions": maybe(st.lists(anything, max_size=2)),
        "idempotency_token": maybe(st.text(max_size=80)),
    },
)


def _yaml_text(data: dict[str, Any]) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    except Exception:
        return repr(data)


def _mutate(text: str, cut: int, junk: str) -> str:
    at = cut % (len(text) + 1)
    return text[:at] + junk + text[at:]


inputs = st.one_of(
    workload_dicts.map(_yaml_text),
    workload_dicts.map(_yaml_text),
    st.builds(_mutate, workload_dicts.map(_yaml_text), st.integers(0, 10**6), st.text(max_size=8)),
    st.builds(
        _mutate,
        workload_dicts.map(_yaml_text),
        st.integers(0, 10**6),
        st.sampled_from(["&a ", "*a", "!!python/object:os.system ", "\t", "? ", "<<: *a\n", "%"]),
    ),
    st.text(max_size=200),
    st.binary(max_size=200),
)


def test_generated(tally) -> None:
    outcomes = {"ok": 0, "invalid": 0, "crash": 0}
    examples = trials(500, 10_000)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @seed(SEED)
    @given(inputs)
    def check(source: Any) -> None:
        if isinstance(source, bytes):
            source = source.decode("utf-8", "replace")
        tally.trials += 1
        outcome, wrong = _load(source)
        outcomes[outcome] += 1
        if outcome == "crash" or wrong:
            tally.crashes += 1
            tally.fail(f"{outcome}: {wrong[:2]} for {source[:200]!r}")

    check()
    tally.notes.update(outcomes)


# --- hostile inputs -------------------------------------------------------------------------


def _container_yaml(names: list[str], ranks: str | None = None, gpus: int | None = None) -> str:
    lines = [
        "experiment_name: hostile",
        f"compute: {{accelerator_type: GPU_1xA10, num_accelerators: {gpus or len(names)}}}",
        "containers:",
    ]
    for name in names:
        lines += [f"  - name: {name!r}", "    command: run", "    unity_catalog_image: main.a.b:1"]
        if ranks is not None:
            lines.append(f"    ranks: {ranks}")
    return "\n".join(lines) + "\n"


def hostile_cases() -> dict[str, bytes]:
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        bomb.append(f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 9) + "]")
    base = "experiment_name: x\ncompute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
    return {
        "alias_bomb": ("\n".join(bomb) + "\n").encode(),
        "alias_bomb_in_parameters": (
            base + "command: run\nparameters:\n" + "".join(f"  {b}\n" for b in bomb)
        ).encode(),
        "over_1_mib": (base + "command: run\n# " + "a" * (MIB + 10) + "\n").encode(),
        "over_1_mib_multibyte": (
            base + "command: run\nparameters: {x: '" + "é" * 600_000 + "'}\n"
        ).encode(),
        "non_utf8": base.encode() + b"command: \xff\xfe run\n",
        "non_utf8_latin1_name": b"experiment_name: caf\xe9\n",
        "traversal_name": _container_yaml(["../x"]).encode(),
        "slash_name": _container_yaml(["a/b"]).encode(),
        "dot_names": _container_yaml([".", ".."]).encode(),
        "huge_rank_list": _container_yaml(
            ["a"], "[" + ", ".join(str(i) for i in range(120_000)) + "]"
        ).encode(),
        # A billion GPUs fanned out over unassigned or implicit ranks: one rank list entry
        # (or one problem) per node would take gigabytes.
        "billion_gpus_two_containers": _container_yaml(["a", "b"], "[0]", 10**9).encode(),
        "billion_gpus_one_container": _container_yaml(["a"], None, 10**9).encode(),
        "deep_parameters": (
            base + "command: run\nparameters: " + "[" * 500 + "]" * 500 + "\n"
        ).encode(),
        "deep_parameters_mappings": (
            base + "command: run\nparameters: " + "{a: " * 300 + "1" + "}" * 300 + "\n"
        ).encode(),
        "python_tag": (base + "command: !!python/object/apply:os.system ['true']\n").encode(),
        "many_documents": (base + "command: run\n---\n" + base).encode(),
        "null_bytes": (base + 'command: "run\x00"\n').encode(),
        "not_a_mapping": b"- just\n- a list\n",
        "empty": b"",
    }


def test_hostile(workspace, airflow_workspace, tally, tmp_path: Path, capfd) -> None:
    from airflow.utils.state import DagRunState

    from air_runtime.cli import main as airo

    ws = airflow_workspace
    rng = rng_for("R4-hostile")
    cases = hostile_cases()
    through_airflow = sorted(cases) if FULL else rng.sample(sorted(cases), 1)
    dag = reliability_dag("reliability_bad_input_text")
    ws.admin.reset_counters()
    for name, data in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_bytes(data)
        # load_workload: from the file (named in the error) and as text.
        try:
            as_text: Any = data.decode("utf-8")
        except UnicodeDecodeError:
            as_text = data  # bytes: decoded (and refused) by load_workload itself
        for source, expect in ((str(path), str(path)), (as_text, None)):
            tally.trials += 1
            outcome, wrong = _load(source, expect)
            if outcome != "invalid" or wrong:
                tally.crashes += 1
                tally.fail(f"{name}: {outcome} {wrong[:2]}")
        # The client path: `airo run FILE` against the workspace.
        tally.trials += 1
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = airo(["run", str(path), "--host", ws.host, "--token", ws.token])
            except SystemExit as exc:
                code = int(exc.code or 0)
            except Exception as exc:
                code = -1
                err.write(f"{type(exc).__name__}: {exc}")
        if code == 0 or "invalid workload" not in err.getvalue() + out.getvalue():
            tally.crashes += 1
            tally.fail(f"{name}: airo run exited {code}: {err.getvalue()[-300:]}")
        # The operator path: a real Airflow task rendering the text.
        if name in through_airflow and b"\xff" not in data and b"\xe9" not in data:
            tally.trials += 1
            capfd.readouterr()
            run = dag.test(run_conf={"workload": data.decode()})
            log = "".join(capfd.readouterr())
            ti = run.get_task_instance("run")
            if run.state != DagRunState.FAILED or "AirConfigurationError" not in log:
                tally.crashes += 1
                tally.fail(f"{name}: the Airflow task ended {run.state} without a config error")
            if ti is not None and ti.try_number != 1:
                tally.unexpected_retries += 1
    counters = ws.admin.counters()["requests"]
    writes = {k: v for k, v in counters.items() if k in WRITES}
    tally.notes.update(cases=len(cases), airflow_cases=through_airflow, write_requests=writes)
    if writes:
        tally.fail(f"invalid workloads reached the workspace: {writes}")

"""WaitPolicy: the one value every wait takes (and a trigger stores whole)."""

from __future__ import annotations

import json
import random
import time

import pytest

from air_runtime import (
    BudgetExceeded,
    FailurePolicy,
    RunState,
    RunTimeout,
    Sweep,
    WaitPolicy,
)
from air_runtime._polling import Pause, until_ended

HOUR_MS = 3_600_000


def _running(run_id: int, tasks: dict[str, tuple[int, bool]], now_ms: int) -> RunState:
    """A run going with one attempt per task: ``hours_ago`` it started on 8 GPUs,
    ``ended`` or not."""
    body = {
        "run_id": run_id,
        "state": {"life_cycle_state": "RUNNING"},
        "tasks": [
            {
                "task_key": key,
                "run_id": run_id * 10 + i,
                "attempt_number": 0,
                "start_time": now_ms - hours_ago * HOUR_MS // 8,
                "end_time": now_ms if ended else None,
                "state": (
                    {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"}
                    if ended
                    else {"life_cycle_state": "RUNNING"}
                ),
                "ai_runtime_task": {
                    "deployments": [
                        {"compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 8}}
                    ]
                },
            }
            for i, (key, (hours_ago, ended)) in enumerate(tasks.items())
        ],
    }
    return RunState.from_api(body)


def test_a_policy_travels_whole_as_plain_json():
    sweep = Sweep("dag/run", "dag", ("manual__1",), 4.0, since_ms=1_700_000_000_000)
    policy = WaitPolicy(
        task_key="grpo",
        deadline=1_900_000_000.5,
        max_gpu_hours=2.0,
        task_budgets={"trial_0": 1.0},
        failure_policy=FailurePolicy.platform_only(),
        sweep=sweep,
    )
    stored = json.loads(json.dumps(policy.to_json()))
    assert WaitPolicy.from_json(stored) == policy
    assert WaitPolicy.from_json({}) == WaitPolicy()  # every key missing: the defaults
    assert WaitPolicy().failure_policy == FailurePolicy()  # deterministic failures stop


def test_options_by_name_replace_the_policy_s_fields():
    base = WaitPolicy(task_key="train", max_gpu_hours=3.0)
    assert WaitPolicy.of(base) is base
    assert WaitPolicy.of(base, timeout=60) == WaitPolicy(
        task_key="train", max_gpu_hours=3.0, timeout=60
    )
    # A mapping as in YAML, and the deprecated switch over the policy's deterministic action.
    mapped = WaitPolicy.of(failure_policy={"deterministic": "orchestrator"})
    assert mapped.failure_policy == FailurePolicy(deterministic="orchestrator")
    assert not WaitPolicy.of(stop_deterministic_retries=False).failure_policy.examines
    with pytest.raises(TypeError):
        WaitPolicy.of(max_gpu_hour=1.0)  # misspelt: refused


def test_the_wait_ends_by_the_earlier_of_deadline_and_timeout():
    now = time.time()
    assert WaitPolicy().ends_by() is None
    assert WaitPolicy(deadline=now + 5, timeout=3600).ends_by() == now + 5
    soon = WaitPolicy(deadline=now + 3600, timeout=5).ends_by()
    assert soon is not None and now + 5 <= soon < now + 3600
    assert WaitPolicy.until_end(5).failure_policy == FailurePolicy.platform_only()


def test_a_budget_of_the_run_or_of_a_task_still_going_is_over_from_the_state_read():
    now_ms = int(time.time() * 1000)
    # trial_0 used 2 GPU-hours and still runs; trial_1 used 3 and ended.
    state = _running(7, {"trial_0": (2, False), "trial_1": (3, True)}, now_ms)
    assert WaitPolicy().over_budget(state) is None and not WaitPolicy().has_budget
    over = WaitPolicy(task_budgets={"trial_0": 1.5}).over_budget(state)
    assert isinstance(over, BudgetExceeded) and over.task_key == "trial_0"
    # An ended task is never over: its hours are final and the run is not to be cancelled.
    assert WaitPolicy(task_budgets={"trial_1": 1.0}).over_budget(state) is None
    assert WaitPolicy(task_budgets={"trial_0": 2.5}).over_budget(state) is None
    whole = WaitPolicy(max_gpu_hours=4.0).over_budget(state)  # 2 + 3 GPU-hours
    assert isinstance(whole, BudgetExceeded) and whole.task_key is None
    stage = WaitPolicy(task_key="trial_0", max_gpu_hours=1.5).over_budget(state)
    assert isinstance(stage, BudgetExceeded) and stage.task_key == "trial_0"


def test_the_one_wait_loop_stops_on_the_policy_s_task_budget_and_deadline():
    now_ms = int(time.time() * 1000)
    state = _running(7, {"trial_0": (2, False)}, now_ms)
    loop = until_ended(
        7, WaitPolicy(task_budgets={"trial_0": 1.0}), poll_interval=1.0, rng=random.Random(0)
    )
    assert next(loop) is None
    with pytest.raises(BudgetExceeded):
        loop.send(state)

    passed = until_ended(
        7, WaitPolicy(deadline=time.time() - 1), poll_interval=1.0, rng=random.Random(0)
    )
    next(passed)
    with pytest.raises(RunTimeout):
        passed.send(state)

    going = until_ended(7, WaitPolicy(timeout=3600), poll_interval=1.0, rng=random.Random(0))
    next(going)
    assert isinstance(going.send(state), Pause)


def _functions(package: str):
    """Every function and method defined in ``package``'s modules (the local workspace
    aside: it serves runs, it waits on none)."""
    import importlib
    import inspect
    import pkgutil

    root = importlib.import_module(package)
    names = [package] + [
        m.name
        for m in pkgutil.walk_packages(root.__path__, f"{package}.")
        if ".local" not in m.name and not m.name.startswith(f"{package}.cli")
    ]
    for name in names:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if getattr(value, "__module__", None) != name:
                continue
            if inspect.isfunction(value):
                yield f"{name}.{value.__qualname__}", value
            elif inspect.isclass(value):
                for member in vars(value).values():
                    if inspect.isfunction(member):
                        yield f"{name}.{member.__qualname__}", member


@pytest.mark.parametrize("package", ["air_runtime", "airflow_air", "dagster_air"])
def test_waits_on_runs_take_the_policy_whole_never_its_fields(package: str):
    """The wait parameters are listed in one type: a wait on a run (a function named for
    waiting or watching) takes a ``WaitPolicy``, never the policy's fields one by one. The
    public waits take them by name as ``**options`` that build one."""
    import dataclasses
    import inspect

    fields = {f.name for f in dataclasses.fields(WaitPolicy)} | {"stop_deterministic_retries"}
    listed = {}
    for qualname, function in _functions(package):
        last = qualname.rsplit(".", 1)[-1].lower()
        if not ("wait" in last or "watch" in last or "until_ended" in last) or "image" in last:
            continue
        signature = inspect.signature(function)
        if "WaitPolicy" in str(signature.return_annotation):
            continue  # it builds the policy (``AirTaskRun.wait_policy``)
        params = set(signature.parameters) & fields
        if params:
            listed[qualname] = sorted(params)
    assert listed == {}

"""The sweep budget's rules (``air_runtime._sweeps``): which runs belong to a sweep by their
names (shortened names included), what they spent and when it is spent, the message, and the
prices and their estimate, each bad value named with its fix."""

from __future__ import annotations

import pytest

from air_runtime import ConfigurationError, Prices, SubmissionKey, Sweep, sweep_budget
from air_runtime._sweeps import MESSAGE_MEMBERS, estimate_cost, spent_error

DAG_RUN = "manual__2026-12-05T07:00:00.123456+00:00"
H = 3_600_000  # ms per hour
T0 = 1_796_000_000_000  # when the runs start (epoch ms)


def _name(pipeline: str, run: str, task: str, index: int | str | None, base: str = "exp") -> str:
    return SubmissionKey("airflow", "ns", pipeline, run, task, index).run_name(base)


def _body(run_id: int, name: str, start: int, end: int | None, accelerators: int = 8) -> dict:
    """A listed run of one attempt, ``start`` and ``end`` in ms after ``T0``."""
    start, end = T0 + start, None if end is None else T0 + end
    state = {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"} if end else {}
    return {
        "run_id": run_id,
        "run_name": name,
        "state": state or {"life_cycle_state": "RUNNING"},
        "tasks": [
            {
                "task_key": "t",
                "run_id": run_id + 1,
                "attempt_number": 0,
                "start_time": start,
                "end_time": end,
                "state": state or {"life_cycle_state": "RUNNING"},
                "ai_runtime_task": {
                    "deployments": [
                        {
                            "compute": {
                                "accelerator_type": "GPU_8xH100",
                                "accelerator_count": accelerators,
                            }
                        }
                    ]
                },
            }
        ],
    }


def _sweep(budget: float = 1.0, **extra) -> Sweep:
    return Sweep("sweep/x", "sweep", (DAG_RUN,), budget, **extra)


def test_a_run_belongs_to_the_sweep_its_name_shows():
    sweep = _sweep()
    assert sweep.member_label(_name("sweep", DAG_RUN, "trial", 3)) == "trial[3]"
    assert sweep.member_label(_name("sweep", DAG_RUN, "train", None)) == "train"
    # A partition key is decoded; a base holding the separator does not confuse it.
    assert sweep.member_label(_name("sweep", DAG_RUN, "train", "lr-0.05", "my--exp")) == (
        "train[lr-0.05]"
    )
    # Another Dag, another Dag run of the same Dag, another second: not members.
    assert sweep.member_label(_name("other", DAG_RUN, "trial", 3)) is None
    later = "manual__2026-12-05T07:00:01+00:00"
    assert sweep.member_label(_name("sweep", later, "trial", 3)) is None
    assert sweep.member_label("budget_sweep") is None  # a run airo submitted
    assert sweep.member_label(None) is None


def test_a_shortened_name_still_belongs_to_its_sweep():
    pipeline = "a_very_long_dag_id_" * 4
    name = _name(pipeline, DAG_RUN, "trial", 11, base="an_experiment_" * 3)
    assert name.count("--") == 5 and "--a_very_long--" in name  # the pipeline cut, a digest
    sweep = Sweep("s", pipeline, (DAG_RUN,), 1.0)
    assert sweep.member_label(name) == "trial[11]"
    assert Sweep("s", "another_dag", (DAG_RUN,), 1.0).member_label(name) is None


def test_a_backfill_sweep_has_every_run_of_the_backfill_whatever_the_job():
    runs = ("0f6b2c1e-1111-4a4a-8888-000000000001", "7d0a9f33-2222-4b4b-9999-000000000002")
    sweep = Sweep("backfill bf", None, runs, 1.0)
    for run in runs:
        assert sweep.member_label(_name("__ASSET_JOB", run, "train", "p0")) == "train[p0]"
    other = "aaaaaaaa-2222-4b4b-9999-000000000002"
    assert sweep.member_label(_name("__ASSET_JOB", other, "train", "p0")) is None


def test_the_spend_sums_every_member_and_counts_a_running_one_up_to_now():
    sweep = _sweep(budget=1.0)
    bodies = [
        _body(10, _name("sweep", DAG_RUN, "trial", 0), 0, H // 4),  # 8 x 0.25 h = 2
        _body(20, _name("sweep", DAG_RUN, "trial", 1), 0, None),  # running since 0
        _body(30, _name("other", DAG_RUN, "trial", 1), 0, H),  # not a member
    ]
    spend = sweep.tally(bodies, now_ms=T0 + H // 8)
    assert [m.run_id for m in spend.members] == [10, 20]
    assert spend.total == pytest.approx(2.0 + 1.0)
    assert spend.spent
    assert [m.run_id for m in spend.running] == [20]
    early = sweep.tally(bodies[1:], now_ms=T0 + H // 16)  # 8 x 1/16 h = 0.5
    assert not early.spent
    assert early.seconds_to_spent() == pytest.approx(0.5 / 8 * 3600)
    assert early.at(T0 + H // 8).spent  # 1.0 at the pace of its running run
    ended = sweep.tally(bodies[:1], now_ms=T0 + H)
    assert ended.seconds_to_spent() == 0.0
    assert Sweep("s", "sweep", (DAG_RUN,), 5.0).tally(bodies[:1]).seconds_to_spent() == float("inf")


def test_the_message_says_what_was_spent_and_by_whom_biggest_first():
    prices = Prices.of({"GPU_8xH100": 98.0}, "USD")
    sweep = _sweep(budget=0.5, prices=prices)
    bodies = [
        _body(12, _name("sweep", DAG_RUN, "trial", 3), 0, H // 20),  # 0.4
        _body(13, _name("sweep", DAG_RUN, "trial", 4), 0, H // 66),  # 0.121
    ]
    text = sweep.tally(bodies, now_ms=T0 + H).message()
    assert text == (
        "sweep sweep/x spent 0.5212 of 0.5 GPU-hours (USD 51.08): run 12 (trial[3]) 0.4 "
        "(USD 39.20), run 13 (trial[4]) 0.121 (USD 11.88)"
    )
    many = [
        _body(100 + i, _name("sweep", DAG_RUN, "trial", i), 0, H // 100)
        for i in range(MESSAGE_MEMBERS + 2)
    ]
    assert "2 more runs 0.16" in sweep.tally(many, now_ms=T0 + H).message()


def test_bad_budgets_and_prices_are_named_with_their_fix():
    assert sweep_budget(None) is None
    assert sweep_budget("2.5") == 2.5
    for bad in (0, -1, "lots", float("inf"), True):
        with pytest.raises(ConfigurationError, match=r"sweep_gpu_hours_budget: .* Fix: give"):
            sweep_budget(bad)
    assert Prices.of(None, None) is None
    with pytest.raises(ConfigurationError, match=r"gpu_hour_prices\.GPU_8xA100: unknown .* Fix"):
        Prices.of({"GPU_8xA100": 10}, "USD")
    with pytest.raises(ConfigurationError, match=r"gpu_hour_prices\.GPU_1xA10: .* positive"):
        Prices.of({"GPU_1xA10": -1}, "USD")
    with pytest.raises(ConfigurationError, match=r"without a currency\. Fix"):
        Prices.of({"GPU_1xA10": 1.2}, None)
    prices = Prices.of({"GPU_1xA10": "1.2"}, "EUR")
    assert prices is not None and Prices.from_json(prices.to_json()) == prices
    assert prices.cost({"GPU_1xA10": 2.0}) == 2.4
    assert prices.cost({"GPU_8xH100": 1.0}) is None  # a type without a price


def test_the_estimate_is_accelerators_times_timeout_times_price():
    prices = Prices.of({"GPU_8xH100": 98.0}, "USD")
    assert prices is not None
    estimate = estimate_cost("GPU_8xH100", 16, 120, 3, prices)
    assert estimate.gpu_hours == 32 and estimate.per_attempt == 3136.0
    assert estimate.text() == (
        "estimate: 16 GPU_8xH100 accelerators x 2 h (timeout_minutes) = 32 GPU-hours x "
        "USD 98.00 = USD 3,136.00 per attempt; up to USD 12,544.00 for 4 attempts "
        "(max_retries 3)"
    )
    unbounded = estimate_cost("GPU_8xH100", 8, None, 0, prices)
    assert "USD 784.00 per hour" in unbounded.text() and "no timeout_minutes" in unbounded.text()
    assert "no price for GPU_1xA10" in estimate_cost("GPU_1xA10", 1, 60, 0, prices).text()


def test_a_sweep_travels_whole():
    sweep = _sweep(since_ms=123, prices=Prices.of({"GPU_1xA10": 1.5}, "USD"))
    assert Sweep.from_json(sweep.to_json()) == sweep
    assert Sweep.from_json(sweep.to_json()).key == sweep.key


def test_a_spent_budget_stops_the_waits_on_runs_still_going_only():
    bodies = [
        _body(10, _name("sweep", DAG_RUN, "trial", 0), 0, H // 4),  # ended
        _body(20, _name("sweep", DAG_RUN, "trial", 1), 0, None),  # running
    ]
    spend = _sweep(budget=1.0).tally(bodies, now_ms=T0 + H // 8)
    assert spend.spent
    assert spent_error(spend, 10) is None  # its wait ends as its run did
    stopped = spent_error(spend, 20)
    assert stopped is not None and stopped.run_id == 20 and stopped.used == pytest.approx(1.0)
    assert spent_error(spend, 30) is not None  # a run too new to be listed yet
    assert spent_error(_sweep(budget=9.0).tally(bodies, now_ms=T0 + H // 8), 20) is None

"""GPU pools (`ai-training/provisioned-capacities`) from both clients against the local
workspace: ids without the resource prefix, reserved accelerators from the list, usage only
from get and following the runs on the pool, FEATURE_DISABLED named (pools.go,
acceptance/air/pools)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from run_states import wait_for_state

from air_runtime import AirClient, AsyncAirClient, GpuPool, load_workload
from air_runtime._errors import ConfigurationError, NotFound

POOLS = [
    {"pool_id": "pool-8xh100-alpha", "accelerator_type": "GPU_8xH100", "accelerator_count": 64},
    {"pool_id": "pool-1xa10-beta", "accelerator_type": "GPU_1xA10", "accelerator_count": 4},
]


def test_list_and_get_follow_the_cli_wire(workspace_factory, recorder):
    ws = workspace_factory(gpu_pools=POOLS)
    with AirClient(ws.host, ws.token, transport=recorder) as client:
        pools = client.list_gpu_pools()
        detail = client.get_gpu_pool("provisioned-capacities/pool-8xh100-alpha")
    assert pools == [
        GpuPool("pool-8xh100-alpha", "GPU_8xH100", 64),
        GpuPool("pool-1xa10-beta", "GPU_1xA10", 4),
    ]  # usage is not in the list: None, not 0
    assert detail == GpuPool("pool-8xh100-alpha", "GPU_8xH100", 64, 0, 64)
    listed = recorder.to("/provisioned-capacities")
    assert [e.path for e in listed] == [
        "/api/2.0/ai-training/provisioned-capacities",
        "/api/2.0/ai-training/provisioned-capacities/pool-8xh100-alpha",
    ]


def test_pages_are_followed_and_one_pool_is_found_without_an_id(workspace_factory):
    many = [
        {"pool_id": f"pool-{i:03d}", "accelerator_type": "GPU_1xA10", "accelerator_count": 1}
        for i in range(130)
    ]
    ws = workspace_factory(gpu_pools=many)
    with AirClient(ws.host, ws.token) as client:
        assert [p.pool_id for p in client.list_gpu_pools()] == [p["pool_id"] for p in many]
        with pytest.raises(ConfigurationError, match="has 130 GPU pools; specify one of: pool-000"):
            client.get_gpu_pool()
        with pytest.raises(NotFound, match=r"'pool-x' not found.*airo pools list"):
            client.get_gpu_pool("pool-x")
    single = workspace_factory(gpu_pools=POOLS[1:])
    with AirClient(single.host, single.token) as client:
        assert client.get_gpu_pool().pool_id == "pool-1xa10-beta"
    empty = workspace_factory()
    with AirClient(empty.host, empty.token) as client:
        assert client.list_gpu_pools() == []
        with pytest.raises(ConfigurationError, match="no GPU pools found"):
            client.get_gpu_pool()


async def test_async_twin_and_feature_disabled(workspace_factory):
    ws = workspace_factory(gpu_pools=POOLS)
    async with AsyncAirClient(ws.host, ws.token) as client:
        assert [p.pool_id for p in await client.list_gpu_pools()] == [
            "pool-8xh100-alpha",
            "pool-1xa10-beta",
        ]
        assert (await client.get_gpu_pool("pool-1xa10-beta")).idle_accelerators == 4
    off = workspace_factory(gpu_pools=POOLS, disabled_features=["gpu-pools"])
    async with AsyncAirClient(off.host, off.token) as client:
        with pytest.raises(
            ConfigurationError, match=r"GPU pools API is not enabled.*FEATURE_DISABLED"
        ):
            await client.list_gpu_pools()
    with (
        AirClient(off.host, off.token) as client,
        pytest.raises(ConfigurationError, match="FEATURE_DISABLED"),
    ):
        client.get_gpu_pool("pool-1xa10-beta")


def test_usage_follows_the_runs_on_the_pool(workspace_factory, tmp_path: Path):
    ws = workspace_factory(gpu_pools=POOLS)
    release = tmp_path / "release"
    workload = load_workload(
        {
            "experiment_name": "pooled",
            "compute": {
                "accelerator_type": "GPU_1xA10",
                "num_accelerators": 2,
                "pool_id": "pool-1xa10-beta",
            },
            "command": f"while [ ! -e {release} ]; do sleep 0.05; done",
        }
    )
    with AirClient(ws.host, ws.token) as client:
        run = client.submit_workload(workload)
        wait_for_state(ws.host, ws.token, run.run_id, "RUNNING")
        during = client.get_gpu_pool("pool-1xa10-beta")
        other = client.get_gpu_pool("pool-8xh100-alpha")
        release.touch()
        assert client.wait(run.run_id, poll_interval=0.1).is_success
        after = client.get_gpu_pool("pool-1xa10-beta")
    assert (during.used_accelerators, during.idle_accelerators) == (2, 2)
    assert (other.used_accelerators, other.idle_accelerators) == (0, 64)
    assert (after.used_accelerators, after.idle_accelerators) == (0, 4)


def test_workspace_option_parsing():
    from air_runtime.local._options import WorkspaceOptions, parse_pool_argument

    assert parse_pool_argument("pool-a10=GPU_1xA10:8") == {
        "pool_id": "pool-a10",
        "accelerator_type": "GPU_1xA10",
        "accelerator_count": 8,
    }
    for bad in ("pool-a10", "pool-a10=GPU_1xA10", "=GPU_1xA10:8", "p=A10:8", "p=GPU_1xA10:0"):
        with pytest.raises(ValueError):
            parse_pool_argument(bad)
    with pytest.raises(ValueError, match="unique"):
        WorkspaceOptions.from_mapping({"gpu_pools": [POOLS[0], POOLS[0]]})
    with pytest.raises(ValueError, match="unknown disabled_features"):
        WorkspaceOptions.from_mapping({"disabled_features": ["nope"]})


def _pooled(name: str, count: int, release: Path):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {
                "accelerator_type": "GPU_1xA10",
                "num_accelerators": count,
                "pool_id": "pool-1xa10-beta",
            },
            "max_retries": 0,
            "command": f"while [ ! -e {release} ]; do sleep 0.05; done",
        }
    )


def _wait_for_message(client: AirClient, run_id: int, words: str) -> None:
    while words not in client.get_run(run_id).state_message:
        time.sleep(0.05)


def test_a_full_pool_makes_runs_wait_for_capacity(workspace_factory, tmp_path: Path):
    ws = workspace_factory(gpu_pools=POOLS)
    first, second = tmp_path / "first", tmp_path / "second"
    with AirClient(ws.host, ws.token) as client:
        big = client.submit_workload(_pooled("big", 3, first))
        wait_for_state(ws.host, ws.token, big.run_id, "RUNNING")
        small = client.submit_workload(_pooled("small", 2, second))
        _wait_for_message(client, small.run_id, "Waiting for GPU compute capacity")
        waiting = client.get_run(small.run_id)
        assert waiting.is_waiting_for_capacity
        assert client.get_gpu_pool("pool-1xa10-beta").used_accelerators == 3
        never = client.submit_workload(_pooled("never", 4, second))
        _wait_for_message(client, never.run_id, "Waiting for GPU compute capacity")
        client.cancel(never.run_id)  # a waiting run can be cancelled: it never started
        assert client.wait(never.run_id, poll_interval=0.1).result_state == "CANCELED"
        first.touch()  # the big run ends and gives its accelerators back
        wait_for_state(ws.host, ws.token, small.run_id, "RUNNING")
        assert client.get_gpu_pool("pool-1xa10-beta").used_accelerators == 2
        second.touch()
        assert client.wait(small.run_id, poll_interval=0.1).is_success
        assert client.get_gpu_pool("pool-1xa10-beta").idle_accelerators == 4
        # More than the whole pool is refused before anything runs.
        problems = client.preflight(_pooled("too-big", 8, second))
    assert [(p.path, p.hint) for p in problems] == [
        ("compute.num_accelerators", "choose a value within the range the message gives")
    ]

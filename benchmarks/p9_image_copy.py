"""P9: copy a generated ~1 GiB image into the stand-in Artifact Registry, side by side with
``skopeo copy`` between the same two registries in the same run.

    flock /tmp/airo-heavy.lock python -m benchmarks.p9_image_copy [--quick]

Two Distribution registry servers on loopback ports: the stand-in Docker Hub (HTTP Basic)
holding a generated single-platform linux/amd64 image (uncompressed tar layers of random
bytes), and a local workspace's stand-in Artifact Registry (token auth, the workspace as
token service). Each copy goes to an empty Artifact Registry of its own, ``airo`` and
``skopeo`` in alternation; both run as fresh processes and are timed end to end. The copying process
reports its own peak RSS (``VmHWM``). Then the ``airo`` copy is repeated onto itself:
the time it takes and the bytes it sends. Targets (design/targets.md P9): peak RSS <=
64 MiB, throughput >= 0.8x skopeo, a repeated copy < 1 s with 0 bytes sent.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import PYTHON, REPO, RESULTS, median, parser_for, write_result

HUB_USER, HUB_PASSWORD = "bench", "bench-hub-password-0123"
MIB = 1024 * 1024

_COPY = """
import json, sys, time
from air_runtime.images import Login, copy_image
def peak_rss_kib():
    # VmHWM: this process image's own high-water mark (ru_maxrss would include the
    # parent's resident set at fork time).
    with open("/proc/self/status") as status:
        return int(next(l for l in status if l.startswith("VmHWM")).split()[1])
hub, target, repository, state = sys.argv[1:5]
hub_password, token = sys.stdin.read().split()
started = time.perf_counter()
result = copy_image(f"{hub}/bench/big:1", target, repository, "1",
                    source_credentials=Login("bench", hub_password),
                    target_credentials=Login("oauthtoken", token), state_dir=state)
seconds = time.perf_counter() - started
print(json.dumps({"copy_s": seconds, "bytes_sent": result.bytes_sent,
                  "bytes_total": result.bytes_total, "digest": result.digest,
                  "peak_rss_kib": peak_rss_kib()}))
"""


def _airo_copy(hub: str, target: str, repository: str, state: Path, token: str) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-c", _COPY, hub, target, repository, str(state)],
        input=f"{HUB_PASSWORD} {token}",  # secrets on stdin, never on a command line
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return {**json.loads(done.stdout.splitlines()[-1]), "wall_s": wall}


def _skopeo_copy(hub: str, target: str, repository: str, authfile: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [
            "skopeo",
            "copy",
            "--preserve-digests",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            "--authfile",
            str(authfile),
            f"docker://{hub}/bench/big:1",
            f"docker://{target}/{repository}:1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return {"wall_s": wall}


def _authfile(scratch: Path, hub: str, target: str, token: str) -> Path:
    """skopeo's logins (a containers auth.json, 0600): never on its command line."""
    path = scratch / "auth.json"
    path.unlink(missing_ok=True)

    def auth(user: str, password: str) -> dict[str, str]:
        return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(
            {"auths": {hub: auth(HUB_USER, HUB_PASSWORD), target: auth("oauthtoken", token)}},
            handle,
        )
    return path


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    names = ["airo", "skopeo"]
    throughput = [result["airo"]["throughput_mib_s"], result["skopeo"]["throughput_mib_s"]]
    left.bar(names, throughput, color=["#3b6fb6", "#999999"])
    left.set_ylabel("MiB/s (median)")
    left.set_title(f"copy of {result['image_mib']:.0f} MiB: {result['throughput_ratio']:.2f}x")
    right.bar(["airo peak RSS", "target"], [result["airo"]["peak_rss_mib"], 64],
              color=["#3b6fb6", "#dddddd"])  # fmt: skip
    right.set_ylabel("MiB")
    right.set_title(
        f"repeat: {result['repeat']['copy_s']:.2f} s, {result['repeat']['bytes_sent']} B"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--layer-mib", type=int, default=None, help="size of each layer")
    args = parser.parse_args()
    from air_runtime.images import Login
    from air_runtime.local import start_local_workspace
    from image_fixtures.image_builder import push_generated_image
    from image_fixtures.registry_server import start_artifact_registry, start_registry_server

    if shutil.which("skopeo") is None or shutil.which("docker-registry") is None:
        print("skopeo and docker-registry are needed: bash .ci/services.sh installs them")
        return 2
    layers = (16 * MIB,) * 4 if args.quick else (128 * MIB,) * 8
    if args.layer_mib:
        layers = (args.layer_mib * MIB,) * len(layers)
    rounds = 1 if args.quick else 3
    scratch = Path(tempfile.mkdtemp(prefix="airo-p9-"))
    try:
        with (
            start_local_workspace(data_dir=scratch / "workspace") as workspace,
            start_registry_server(scratch / "hub", users={HUB_USER: HUB_PASSWORD}) as hub,
        ):
            built = push_generated_image(
                hub.host, "bench/big", "1", layer_sizes=layers,
                login=Login(HUB_USER, HUB_PASSWORD), workdir=scratch / "build",
            )  # fmt: skip
            ours: list[dict[str, Any]] = []
            theirs: list[dict[str, Any]] = []
            repeat: dict[str, Any] = {}
            for number in range(rounds):
                # Each copy into an empty Artifact Registry of its own: nothing is there to
                # skip or mount (skopeo's blob-info cache would mount blobs a previous copy
                # left in the same registry), and the order alternates between rounds.
                order = ("airo", "skopeo") if number % 2 == 0 else ("skopeo", "airo")
                for tool in order:
                    directory = scratch / f"ar-{tool}-{number}"
                    with start_artifact_registry(workspace, directory) as target:
                        if tool == "airo":
                            ours.append(_airo_copy(hub.host, target.host, "main.bench.big",
                                                   scratch / "state", workspace.token))  # fmt: skip
                            if number == rounds - 1:
                                repeat = _airo_copy(hub.host, target.host, "main.bench.big",
                                                    scratch / "state", workspace.token)  # fmt: skip
                        else:
                            authfile = _authfile(scratch, hub.host, target.host, workspace.token)
                            theirs.append(_skopeo_copy(hub.host, target.host, "main.bench.big",
                                                       authfile))  # fmt: skip
                    shutil.rmtree(directory, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    size = built.size
    ours_wall = median(r["wall_s"] for r in ours)
    theirs_wall = median(r["wall_s"] for r in theirs)
    result: dict[str, Any] = {
        "image_bytes": size,
        "image_mib": size / MIB,
        "layers": len(layers),
        "rounds": rounds,
        "airo": {
            "wall_s": [r["wall_s"] for r in ours],
            "copy_s": [r["copy_s"] for r in ours],
            "bytes_sent": [r["bytes_sent"] for r in ours],
            "peak_rss_mib": max(r["peak_rss_kib"] for r in ours) / 1024,
            "throughput_mib_s": size / MIB / ours_wall,
        },
        "skopeo": {
            "wall_s": [r["wall_s"] for r in theirs],
            "throughput_mib_s": size / MIB / theirs_wall,
            "version": subprocess.run(
                ["skopeo", "--version"], capture_output=True, text=True
            ).stdout.strip(),
        },
        "throughput_ratio": theirs_wall / ours_wall,
        "repeat": {
            "wall_s": repeat["wall_s"],
            "copy_s": repeat["copy_s"],
            "bytes_sent": repeat["bytes_sent"],
            "peak_rss_mib": repeat["peak_rss_kib"] / 1024,
        },
        "targets": {
            "peak_rss_mib": 64,
            "throughput_ratio": 0.8,
            "repeat_s": 1.0,
            "repeat_bytes": 0,
        },
    }
    result["met"] = {
        "peak_rss": result["airo"]["peak_rss_mib"] <= 64,
        "throughput": result["throughput_ratio"] >= 0.8,
        "repeat": repeat["copy_s"] < 1.0 and repeat["bytes_sent"] == 0,
        "every_copy_sent_the_whole_image": all(r["bytes_sent"] == size for r in ours),
    }
    path = write_result("P9", result)
    _plot(result, RESULTS / "p9_image_copy.png")
    print(json.dumps({k: result[k] for k in ("throughput_ratio", "met")} | {
        "peak_rss_mib": result["airo"]["peak_rss_mib"], "repeat": result["repeat"], "file": str(path)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Rank 0 of the toy RL workload: serves a tiny softmax policy over a multi-armed bandit.

Stands in for an inference server (vLLM) on a GPU node. The trainer on rank 1 pulls
rollouts from it and sends back gradient steps:

    GET  /health    {"status": "ok", "step": n, "num_actions": k}
    POST /rollout   {"n": 32} -> {"rollouts": [{"action", "reward"}], "probs", "expected_reward", "step"}
    POST /update    {"gradient": [...], "learning_rate": lr} -> {"step", "probs", "expected_reward"}
    POST /shutdown  -> {"status": "stopping"}; the process then exits 0

Listens on 0.0.0.0:$MASTER_PORT (the platform's coordination port of rank 0).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rl_common import fail, load_hyperparameters, log

ROLE = "policy_server"
# Success probability of each arm: the best arm is index 2, a uniform policy earns 0.5.
ARM_REWARD_PROBABILITIES = (0.2, 0.4, 0.9, 0.5)
# Without a trainer the server would hold a node forever; give up after this long idle.
DEFAULT_IDLE_TIMEOUT_SECONDS = 120.0


class BanditPolicy:
    """Softmax over one logit per arm; rewards are Bernoulli draws from a seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.logits = [0.0] * len(ARM_REWARD_PROBABILITIES)
        self.step = 0
        self.rng = random.Random(seed)
        self.lock = threading.Lock()

    def probs(self) -> list[float]:
        top = max(self.logits)
        weights = [math.exp(v - top) for v in self.logits]
        total = sum(weights)
        return [w / total for w in weights]

    def expected_reward(self) -> float:
        return sum(p * q for p, q in zip(self.probs(), ARM_REWARD_PROBABILITIES, strict=True))

    def rollout(self, n: int) -> dict[str, Any]:
        with self.lock:
            probs = self.probs()
            rollouts = []
            for _ in range(n):
                action = self.rng.choices(range(len(probs)), weights=probs)[0]
                reward = 1.0 if self.rng.random() < ARM_REWARD_PROBABILITIES[action] else 0.0
                rollouts.append({"action": action, "reward": reward})
            return {
                "rollouts": rollouts,
                "probs": probs,
                "expected_reward": self.expected_reward(),
                "step": self.step,
            }

    def update(self, gradient: list[float], learning_rate: float) -> dict[str, Any]:
        if len(gradient) != len(self.logits):
            raise ValueError(f"gradient has {len(gradient)} entries, the policy {len(self.logits)}")
        with self.lock:
            # Gradient ascent on the expected reward.
            self.logits = [
                v + learning_rate * g for v, g in zip(self.logits, gradient, strict=True)
            ]
            self.step += 1
            return {
                "step": self.step,
                "probs": self.probs(),
                "expected_reward": self.expected_reward(),
            }

    def load(self, logits: list[float], step: int) -> dict[str, Any]:
        """Take a checkpoint's policy (the trainer resumes a run that was cut short)."""
        if len(logits) != len(self.logits):
            raise ValueError(f"checkpoint has {len(logits)} logits, the policy {len(self.logits)}")
        with self.lock:
            self.logits, self.step = list(logits), step
            return {"step": self.step, "probs": self.probs()}


class PolicyServer(ThreadingHTTPServer):
    """The HTTP server plus what its handlers share: the policy and an activity flag."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], policy: BanditPolicy) -> None:
        super().__init__(address, PolicyHandler)
        self.policy = policy
        self.activity = threading.Event()


class PolicyHandler(BaseHTTPRequestHandler):
    server: PolicyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per update is enough; per-request lines drown the log

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        data = json.loads(self.rfile.read(length) or b"{}") if length else {}
        return data if isinstance(data, dict) else {}

    def do_GET(self) -> None:
        self.server.activity.set()
        policy = self.server.policy
        if self.path == "/health":
            self._reply(
                200, {"status": "ok", "step": policy.step, "num_actions": len(policy.logits)}
            )
        else:
            self._reply(404, {"error": f"no route GET {self.path}"})

    def do_POST(self) -> None:
        self.server.activity.set()
        policy = self.server.policy
        try:
            body = self._body()
            if self.path == "/rollout":
                self._reply(200, policy.rollout(int(body.get("n", 16))))
            elif self.path == "/update":
                result = policy.update(
                    [float(g) for g in body["gradient"]], float(body["learning_rate"])
                )
                probs = ", ".join(f"{p:.2f}" for p in result["probs"])
                log(
                    ROLE,
                    f"update {result['step']}: probs [{probs}] "
                    f"expected reward {result['expected_reward']:.3f}",
                )
                self._reply(200, result)
            elif self.path == "/load":
                loaded = policy.load([float(v) for v in body["logits"]], int(body["step"]))
                log(ROLE, f"loaded a checkpoint's policy at update {loaded['step']}")
                self._reply(200, loaded)
            elif self.path == "/shutdown":
                log(ROLE, f"shutdown requested after {policy.step} updates")
                self._reply(200, {"status": "stopping"})
                # shutdown() waits for serve_forever to return: call it off this thread.
                threading.Thread(target=self.server.shutdown, daemon=True).start()
            else:
                self._reply(404, {"error": f"no route POST {self.path}"})
        except (KeyError, TypeError, ValueError) as exc:
            self._reply(400, {"error": f"bad request: {exc}"})


def main() -> int:
    port_text = os.environ.get("MASTER_PORT")
    if not port_text:
        fail(ROLE, "MASTER_PORT is not set; this script runs as rank 0 of a multi-node workload")
    hyperparameters = load_hyperparameters()
    seed = int(hyperparameters.get("seed", 0))
    idle_timeout = float(os.environ.get("RL_IDLE_TIMEOUT_SECONDS", DEFAULT_IDLE_TIMEOUT_SECONDS))
    policy = BanditPolicy(seed)
    server = PolicyServer(("0.0.0.0", int(port_text or 0)), policy)
    idle_expired = threading.Event()

    def stop_when_idle() -> None:
        while server.activity.wait(idle_timeout):
            server.activity.clear()
        idle_expired.set()
        server.shutdown()

    threading.Thread(target=stop_when_idle, daemon=True).start()
    log(
        ROLE,
        f"serving a {len(policy.logits)}-armed bandit policy on 0.0.0.0:{port_text} "
        f"(seed {seed}, nodes {os.environ.get('NUM_NODES', '?')})",
    )
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    if idle_expired.is_set():
        log(ROLE, f"ERROR: no request for {idle_timeout:.0f}s, giving up")
        return 1
    log(ROLE, f"stopped; final expected reward {policy.expected_reward():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

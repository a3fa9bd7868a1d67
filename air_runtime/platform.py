"""Facts about the platform that more than one part of the package relies on.

The workload checker, the plans, the client, the states and the local workspace all import
these from here, so a platform change is made in one place.
"""

from __future__ import annotations

import re

# Accelerators per node of each accelerator type (the CLI's accelerator table; a workload's
# num_accelerators is a multiple of it, and the node count is their quotient).
GPUS_PER_NODE: dict[str, int] = {
    "GPU_1xA10": 1,
    "GPU_1xH100": 1,
    "GPU_8xH100": 8,
    "GPU_8xB300": 8,
}

# A task key of a run (and a workload's experiment name, which becomes its task key): the
# Jobs API's rule.
TASK_KEY_CHARACTERS = "A-Za-z0-9_-"
MAX_TASK_KEY_LENGTH = 100
TASK_KEY_RE = re.compile(rf"^[{TASK_KEY_CHARACTERS}]{{1,{MAX_TASK_KEY_LENGTH}}}$")

# What the secrets API accepts in a key and in a scope name (both at most 128 characters).
SECRET_KEY_CHARACTERS = "A-Za-z0-9_.-"
SECRET_SCOPE_CHARACTERS = "A-Za-z0-9_.@-"
MAX_SECRET_NAME_LENGTH = 128

# An environment variable's name, in a workload and in the submit body.
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The Jobs API's limit on a run's idempotency token.
MAX_IDEMPOTENCY_TOKEN_LENGTH = 64

__all__ = [
    "ENV_NAME_RE",
    "GPUS_PER_NODE",
    "MAX_IDEMPOTENCY_TOKEN_LENGTH",
    "MAX_SECRET_NAME_LENGTH",
    "MAX_TASK_KEY_LENGTH",
    "SECRET_KEY_CHARACTERS",
    "SECRET_SCOPE_CHARACTERS",
    "TASK_KEY_CHARACTERS",
    "TASK_KEY_RE",
]

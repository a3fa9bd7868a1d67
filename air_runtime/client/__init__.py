"""The HTTP client of a Databricks workspace (or the local workspace).

``AirClient`` and ``AsyncAirClient`` share one request/response core; see ``_core.py``.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._cancel_causes import CancelCause
from ._client import AirClient, AsyncAirClient
from ._core import Identity, ImageRegistration, LogRecord, RetryPolicy, SubmittedRun
from ._runs import RunResult
from ._secrets import PruneResult, SecretInfo, SubmissionSecrets, secret_key_name

if TYPE_CHECKING:
    from ._pools import GpuPool as GpuPool

# What a submitting task does not use loads on first use (``air_runtime`` says why).
__getattr__ = lazy_exports(globals(), {"GpuPool": "air_runtime.client._pools"})

__all__ = [
    "AirClient",
    "AsyncAirClient",
    "CancelCause",
    "GpuPool",
    "Identity",
    "ImageRegistration",
    "LogRecord",
    "PruneResult",
    "RetryPolicy",
    "RunResult",
    "SecretInfo",
    "SubmissionSecrets",
    "SubmittedRun",
    "secret_key_name",
]

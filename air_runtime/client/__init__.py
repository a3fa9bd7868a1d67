"""The HTTP client of a Databricks workspace (or the local workspace).

``AirClient`` and ``AsyncAirClient`` share one request/response core; see ``_core.py``.
"""

from ._client import AirClient, AsyncAirClient
from ._core import Identity, ImageRegistration, LogRecord, RetryPolicy, SubmittedRun
from ._pools import GpuPool
from ._runs import RunResult
from ._secrets import PruneResult, SecretInfo, SubmissionSecrets, secret_key_name

__all__ = [
    "AirClient",
    "AsyncAirClient",
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

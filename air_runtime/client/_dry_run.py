"""``airo run --dry-run``: the workspace's own check of a workload, nothing uploaded or
submitted (validateconfig.go validateDryRunConfig). Unlike the check at submit, which goes
on when the service is unavailable, a dry run has nothing else to report: unavailability
is an error, field errors are the answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import AuthError, NotFound, PlatformError, Problem
from ._core import ClientCore, Flow, RetryPolicy
from ._submit import PREFLIGHT_PATH, PREFLIGHT_TIMEOUT_S, field_problems, plan_workload

if TYPE_CHECKING:
    from ..plan import Stage
    from ..workload import Workload

# One request; a second only after 429/503 (dryRunValidationMaxAttempts = 2), each within
# the CLI's validation timeout.
DRY_RUN_RETRY = RetryPolicy(max_attempts=2, max_total_s=2 * PREFLIGHT_TIMEOUT_S)


def preflight(
    core: ClientCore,
    workload: Workload | Sequence[Stage],
    *,
    idempotency_token: str | None = None,
) -> Flow[list[Problem]]:
    """Every field error the workspace finds in the workload (each stage's body once);
    empty when it would be accepted. ``PlatformError`` when the check could not be made."""
    plan = yield from plan_workload(
        core, workload, idempotency_token=idempotency_token, run_name=None
    )
    problems: list[Problem] = []
    for body in plan.preflight_bodies:
        try:
            answer = yield from core.call(
                "POST",
                PREFLIGHT_PATH,
                json=body,
                policy=DRY_RUN_RETRY,
                timeout_s=PREFLIGHT_TIMEOUT_S,
            )
        except AuthError:
            raise
        except NotFound as error:
            raise PlatformError(
                f"config validation unavailable: {error}", status_code=404
            ) from None
        except PlatformError as error:
            status = error.status_code
            refused = status is not None and 400 <= status < 500 and status not in (408, 429)
            if refused and error.error_code != "FEATURE_DISABLED":
                problems.append(Problem("", str(error), "the workspace refused the workload"))
                continue
            raise PlatformError(
                f"config validation unavailable: {error}",
                status_code=status,
                error_code=error.error_code,
            ) from None
        problems.extend(field_problems(answer))
    return problems

"""``airo run --dry-run``: the workspace's own check of a workload, nothing uploaded or
submitted (validateconfig.go validateDryRunConfig). Unlike the check at submit, which goes
on when the service is unavailable, a dry run has nothing else to report: unavailability
is an error, field errors are the answer. The workload's secret references are looked up
too (``check_secrets``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import AuthError, NotFound, PlatformError, Problem
from ._core import ClientCore, Flow, RetryPolicy
from ._refusals import field_problems
from ._secrets import list_secrets
from ._submit import PREFLIGHT_PATH, PREFLIGHT_TIMEOUT_S, plan_workload

if TYPE_CHECKING:
    from ..plan import Stage
    from ..workload import SecretRef, Workload

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


@dataclass(frozen=True)
class SecretCheck:
    """What a dry run found of the workload's secret references: the keys missing from
    their scopes (as problems at the variable that names them), and the scopes whose keys
    could not be listed (the platform still checks them when the run starts)."""

    problems: tuple[Problem, ...] = ()
    unchecked: tuple[str, ...] = ()


def check_secrets(core: ClientCore, workload: Workload) -> Flow[SecretCheck]:
    """Every ``scope/key`` the workload's ``secrets:`` and its containers' ``{{secrets/...}}``
    values name, looked up with one ``secrets/list`` per scope (keys only, never values;
    ``_secrets.list_secrets``): a key that is not there fails the run at its start, so a
    dry run says so first."""
    refs: list[tuple[str, SecretRef]] = [(f"secrets.{n}", r) for n, r in workload.secrets.items()]
    for i, container in enumerate(workload.containers or ()):
        path = f"containers[{i}].environment_variables.variables"
        refs += [(f"{path}.{n}", r) for n, r in container.secrets.items()]
    keys: dict[str, set[str]] = {}
    unchecked: list[str] = []
    for scope in sorted({ref.scope for _, ref in refs}):
        try:
            keys[scope] = {info.key for info in (yield from list_secrets(core, scope))}
        except AuthError:
            raise
        except PlatformError as error:  # e.g. no permission to list it
            unchecked.append(f"secret scope {scope!r}: {error}")
    problems = tuple(
        Problem(
            path,
            f"secret scope {ref.scope!r} has no key {ref.key!r} (the run would fail at its start)",
            f"store it with `databricks secrets put-secret {ref.scope} {ref.key}` (the scope "
            f"first, if it is missing: `databricks secrets create-scope {ref.scope}`), or "
            "correct the reference",
        )
        for path, ref in refs
        if ref.scope in keys and ref.key not in keys[ref.scope]
    )
    return SecretCheck(problems, tuple(unchecked))

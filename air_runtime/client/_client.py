"""``AirClient`` and ``AsyncAirClient``: two drivers of the flows in this package.

They differ only where I/O happens: sending a request, sleeping, running sub-flows
concurrently (threads vs. tasks), running blocking work, asking credentials for headers.
The image flows (``_images``) are imported where used: most clients never register one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from .._auth import Credentials, resolve_credentials
from .._failure_policy import RetryDecision
from .._redaction import Redactor
from .._request_budget import BudgetedTransport
from .._states import RunState
from .._wait_policy import WaitPolicy
from . import _cancel_causes, _identity, _runs, _secrets, _submit
from ._core import (
    AuthHeaders,
    ClientCore,
    Emit,
    Flow,
    Gather,
    Identity,
    ImageRegistration,
    LogRecord,
    Offload,
    RefreshAuth,
    RetryPolicy,
    Sleep,
    Step,
    SubmittedRun,
    Transmit,
)
from ._operations import AsyncOperations, SyncOperations
from ._runs import RunResult
from ._secrets import PruneResult, SecretInfo, SubmissionSecrets

if TYPE_CHECKING:
    from .._docker_credentials import DockerCredential
    from .._sweeps import Sweep, SweepSpend
    from ..plan import Stage, SubmissionPlan
    from ..workload import Workload
    from ._cancel_causes import CancelCause
    from ._live_lines import LineStream, LiveLines

T = TypeVar("T")

# One pool per client; P1 caps a triggerer's connections to a workspace at 20.
_MAX_CONNECTIONS = 20
# A 4-container launch directory has ~15 files: send them in one wave, within the pool.
_DEFAULT_CONCURRENT_UPLOADS = 16


class _BaseClient:
    def __init__(
        self,
        host: str | None = None,
        token: str | None = None,
        *,
        credentials: Credentials | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        user_agent_extra: str | None = None,
        max_concurrent_uploads: int = _DEFAULT_CONCURRENT_UPLOADS,
        poll_interval: float = 5.0,
        host_source: str | None = None,
    ) -> None:
        resolved_host, resolved_credentials = resolve_credentials(host, token, credentials)
        if host_source is None and not host:
            host_source = getattr(resolved_credentials, "host_source", None)
        # Seconds between a wait's status checks unless the wait names its own.
        self.poll_interval = float(poll_interval)
        self._core = ClientCore(
            resolved_host,
            resolved_credentials,
            timeout=timeout,
            retry=retry,
            user_agent_extra=user_agent_extra,
            max_concurrent_uploads=max_concurrent_uploads,
            host_source=host_source,
        )

    @property
    def host(self) -> str:
        return self._core.host

    @property
    def credentials(self) -> Credentials:
        return self._core.credentials

    @property
    def redactor(self) -> Redactor:
        """Redacts this client's credentials (token, client secret) from text; orchestrators
        add the values they resolve with ``client.redactor.with_values(...)``."""
        return self._core.redactor

    def _limits(self) -> httpx.Limits:
        return httpx.Limits(
            max_connections=_MAX_CONNECTIONS, max_keepalive_connections=_MAX_CONNECTIONS
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(host={self.host!r}, credentials={self.credentials.source!r})"


@functools.cache
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """httpx's default verifying context (certifi's CA bundle, or SSL_CERT_FILE / SSL_CERT_DIR),
    made once per process: loading the CA bundle costs ~40 ms of CPU, per client otherwise."""
    return httpx.create_ssl_context()


def tls_context() -> ssl.SSLContext:
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


def environment_proxy(host: str) -> str | None:
    """The proxy the environment names for requests to ``host`` (``HTTPS_PROXY``,
    ``HTTP_PROXY``, ``ALL_PROXY``, minus ``NO_PROXY``), as httpx reads them."""
    proxies = urllib.request.getproxies_environment()
    scheme, _, rest = host.partition("://")
    hostname = rest.split("/", 1)[0]
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(hostname):
        return None
    return proxy


def verify_for(host: str) -> ssl.SSLContext | bool:
    """What the client verifies TLS with. Every request goes to the host itself, so a
    plain-HTTP host (the local workspace) is never reached over TLS and needs no CA bundle;
    unless a proxy from the environment (which could be an https one) carries its requests."""
    if host.startswith("http://") and environment_proxy(host) is None:
        return False
    return tls_context()


class AirClient(_BaseClient, SyncOperations):
    """Synchronous client. Thread-safe; use one per workspace and close it (or ``with``).

    ``host_source`` says where the host was set (``"--host"``, ``"the host field of Airflow
    connection 'x'"``), named in the fix of ``WorkspaceUnreachable`` when it cannot be
    reached."""

    def __init__(
        self,
        host: str | None = None,
        token: str | None = None,
        *,
        credentials: Credentials | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        user_agent_extra: str | None = None,
        max_concurrent_uploads: int = _DEFAULT_CONCURRENT_UPLOADS,
        poll_interval: float = 5.0,
        host_source: str | None = None,
    ) -> None:
        super().__init__(
            host,
            token,
            credentials=credentials,
            timeout=timeout,
            retry=retry,
            user_agent_extra=user_agent_extra,
            max_concurrent_uploads=max_concurrent_uploads,
            poll_interval=poll_interval,
            host_source=host_source,
        )
        self._http = httpx.Client(
            transport=transport,
            timeout=self._core.timeout,
            limits=self._limits(),
            verify=verify_for(self._core.host),
        )
        self._identity_ahead: threading.Thread | None = None  # see ``prefetch_identity``

    # --- driver -------------------------------------------------------------------------

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Transmit):
            return self._http.send(step.request)
        if isinstance(step, AuthHeaders):
            return self._core.credentials.headers()
        if isinstance(step, Sleep):
            if isinstance(step.wake, threading.Event):
                step.wake.wait(step.seconds)
            else:
                time.sleep(step.seconds)
            return None
        if isinstance(step, Gather):
            return self._gather(step)
        if isinstance(step, Offload):
            return step.function()
        if isinstance(step, RefreshAuth):
            self._core.credentials.refresh()
            return None
        raise TypeError(f"unexpected step {step!r}")

    def _gather(self, step: Gather) -> list[Any]:
        with ThreadPoolExecutor(max_workers=min(step.limit, len(step.flows))) as pool:
            futures = [pool.submit(self._drive, flow) for flow in step.flows]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]  # type: ignore[misc]
        return [f.result() for f in futures]

    def _steps(self, flow: Flow[T]) -> Iterator[Any]:
        """Drive ``flow``; yield what it emits; the flow's result ends the iteration."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.throw(error) if error is not None else flow.send(answer)
            except StopIteration as stop:
                return stop.value
            answer, error = None, None
            if isinstance(step, Emit):
                yield step.item
                continue
            try:
                answer = self._perform(step)
            except Exception as exc:
                error = exc

    def _run(self, flow: Flow[T]) -> T:
        if self._identity_ahead is not None:  # a flow may need the identity being asked for
            self._identity_settled()
        return self._drive(flow)

    def _drive(self, flow: Flow[T]) -> T:
        steps = self._steps(flow)
        try:
            item = next(steps)
        except StopIteration as stop:
            result: T = stop.value
            return result
        raise TypeError(f"flow emitted {item!r} but was run, not iterated")

    def run_flow(self, start: Callable[[ClientCore], Flow[T]]) -> T:
        """Run a flow of requests composed over this client's core: an operation written
        once for both clients outside this package (``air_runtime.Submission``'s steps),
        with this client's transport, credentials and retries."""
        return self._run(start(self._core))

    # --- operations ---------------------------------------------------------------------

    def prefetch_identity(self) -> None:
        """Start asking who the credentials belong to, in the background. It is a submit's
        first request, and nothing else needs its answer: a caller with other work before
        its submit (an Airflow task reading its deployment namespace) saves that round trip.
        The client's next operation waits for this answer instead of asking again; a
        failure is raised by the next ``whoami`` (the submit's own), so a refused credential
        still costs one request."""
        if self._core.identity is not None or self._identity_ahead is not None:
            return
        thread = threading.Thread(target=self._whoami_ahead, name="air-whoami", daemon=True)
        self._identity_ahead = thread
        thread.start()

    def _whoami_ahead(self) -> None:
        try:
            self._drive(_identity.whoami(self._core))
        except Exception as error:  # raised by the next whoami (``ClientCore.identity_error``)
            self._core.identity_error = error

    def _identity_settled(self) -> None:
        ahead, self._identity_ahead = self._identity_ahead, None
        if ahead is not None:
            ahead.join()

    def whoami(self) -> Identity:
        return self._run(_identity.whoami(self._core))

    def metastore_summary(self) -> dict[str, Any]:
        return self._run(_identity.metastore_summary(self._core))

    def submit(self, plan: SubmissionPlan) -> SubmittedRun:
        return self._run(_submit.submit(self._core, plan))

    def submit_workload(
        self,
        workload: Workload | Sequence[Stage],
        *,
        idempotency_token: str | None = None,
        run_name: str | None = None,
    ) -> SubmittedRun:
        return self._run(
            _submit.submit_workload(
                self._core, workload, idempotency_token=idempotency_token, run_name=run_name
            )
        )

    def get_run(self, run_id: int, *, include_history: bool = False) -> RunState:
        """The run as ``runs/get`` shows it; ``include_history``: with its repairs."""
        return self._run(_runs.get_run(self._core, run_id, include_history=include_history))

    def get_output(self, task_run_id: int) -> dict[str, Any]:
        return self._run(_runs.get_output(self._core, task_run_id))

    def list_runs(
        self, active_only: bool = True, limit: int = 25, page_token: str | None = None
    ) -> tuple[list[RunState], str | None]:
        return self._run(
            _runs.list_runs(self._core, active_only=active_only, limit=limit, page_token=page_token)
        )

    def list_runs_raw(self, params: dict[str, Any]) -> dict[str, Any]:
        """One ``runs/list`` page as the API answered it."""
        return self._run(_runs.list_runs_raw(self._core, params))

    def wait(
        self,
        run_id: int,
        policy: WaitPolicy | None = None,
        *,
        poll_interval: float | None = None,
        on_update: Callable[[RunState], None] | None = None,
        on_retry: Callable[[RetryDecision], None] | None = None,
        **options: Any,
    ) -> RunState:
        """Poll (every ``poll_interval`` s, by default the client's) until the run ends, or
        with the policy's ``task_key`` until that task of it ends (a workflow stage ends
        before its run); the state that shows the end. ``policy`` (``WaitPolicy``, the
        default when None) says what else ends the wait: past its ``timeout`` (seconds) or
        ``deadline`` (``time.time()``), ``RunTimeout``, the run goes on; past
        ``max_gpu_hours`` (of the run, or of the stage), ``BudgetExceeded``, the run goes on
        until cancelled; an attempt that failed while the platform will retry it is decided
        by its ``failure_policy`` (a deterministic failure stops by default), the decision
        told to ``on_retry``: one that gets no platform retry, ``RetriesStopped``; with a
        ``sweep``, one listing of it per poll: once its budget is spent, ``SweepBudgetSpent``
        (cancel with ``cancel(run_id, cause=...)``). ``options`` are the policy's fields by
        name, in place of (or over) ``policy``: ``wait(run_id, timeout=60)``."""
        return self._run(
            _runs.wait(
                self._core,
                run_id,
                WaitPolicy.of(policy, **options),
                poll_interval=self.poll_interval if poll_interval is None else poll_interval,
                on_update=on_update,
                on_retry=on_retry,
            )
        )

    def raise_for_failure(self, state: RunState) -> None:
        self._run(_runs.raise_for_failure(self._core, state))

    def run_result(self, state: RunState) -> RunResult:
        return self._run(_runs.run_result(self._core, state))

    def cancel(self, run_id: int, *, cause: CancelCause | None = None) -> None:
        """Cancel the run; ``cause`` (why our code cancels it) is kept next to its command
        first, where ``airo get`` reads it (``_cancel_causes``); a spent sweep's cause also
        cancels the sweep's other runs still going."""
        self._run(_cancel_causes.cancel_with_cause(self._core, run_id, cause))

    def sweep_spend(self, sweep: Sweep) -> SweepSpend:
        """What the sweep's runs spent, from one listing of the workspace's runs."""
        return self._run(_runs.sweep_spend(self._core, sweep))

    def iter_logs(
        self,
        run_id: int,
        *,
        node: int = 0,
        follow: bool = False,
        until: threading.Event | None = None,
    ) -> Iterator[LogRecord]:
        """One node's log records; ``follow`` keeps reading until the run ends (``until``,
        set by a caller that already watches the run once it ended, saves a runs/get per
        read and ends the pause before the last read)."""
        yield from self._steps(
            _runs.iter_logs(self._core, run_id, node=node, follow=follow, until=until)
        )

    def iter_run_logs(
        self,
        run_id: int,
        *,
        task_key: str | None = None,
        node: int | None = None,
        follow: bool = False,
        until: threading.Event | None = None,
    ) -> Iterator[LogRecord]:
        """Every node's records of every attempt of every task of the run (or of the task
        ``task_key``, or only node ``node``), labelled (``record.label``); ``follow``
        keeps reading until the run ends."""
        yield from self._steps(
            _runs.iter_run_logs(
                self._core, run_id, task_key=task_key, node=node, follow=follow, until=until
            )
        )

    def read_newest_lines(self, stream: LineStream, count: int) -> LiveLines | None:
        """At most ``count`` unread records of one running stream, the newest (see
        ``_live_lines``); None when the workspace serves no logs."""
        from . import _live_lines  # a waiter's, never a submitting task's

        return self._run(_live_lines.read_newest(self._core, stream, count))

    def ensure_secret_scope(self, scope: str) -> None:
        self._run(_secrets.ensure_secret_scope(self._core, scope))

    def put_secret(self, scope: str, key: str, value: str) -> None:
        self._run(_secrets.put_secret(self._core, scope, key, value))

    def materialize_secrets(
        self, values: Mapping[str, str], *, scope: str, key_prefix: str = ""
    ) -> dict[str, str]:
        return self._run(
            _secrets.materialize_secrets(self._core, values, scope=scope, key_prefix=key_prefix)
        )

    def list_secrets(self, scope: str) -> list[SecretInfo]:
        """The keys of ``scope`` (never values) with their last update times."""
        return self._run(_secrets.list_secrets(self._core, scope))

    # --- orchestrator secrets under keys of one logical submission ---------------------

    def store_submission_secrets(
        self, secrets: SubmissionSecrets, values: Mapping[str, str], stage: str | None = None
    ) -> dict[str, str]:
        """Write one submission's values (one stage of it); ``{NAME: "scope/key"}``."""
        return self._run(_secrets.store_submission_secrets(self._core, secrets, values, stage))

    def mark_submission_run(self, secrets: SubmissionSecrets, run_id: int) -> None:
        """Record which run reads the submission's keys, so they go once it has ended."""
        self._run(_secrets.mark_submission_run(self._core, secrets, run_id))

    def delete_submission_secrets(self, secrets: SubmissionSecrets) -> int:
        """Delete every key of the submission; the number deleted."""
        return self._run(_secrets.delete_submission_secrets(self._core, secrets))

    def sweep_ended_submissions(self, secrets: SubmissionSecrets) -> int:
        """Delete what earlier submissions of the same task left behind once their runs
        ended; the number deleted."""
        return self._run(_secrets.sweep_ended_submissions(self._core, secrets))

    def prune_submission_secrets(
        self, scope: str, *, older_than_s: float, now_ms: int, dry_run: bool = False
    ) -> PruneResult:
        """``airo secrets prune``: keys of ended submissions older than ``older_than_s``."""
        return self._run(
            _secrets.prune_submission_secrets(
                self._core, scope, older_than_s=older_than_s, now_ms=now_ms, dry_run=dry_run
            )
        )

    def register_image(
        self,
        ref: str,
        *,
        credentials_scope: str | None = None,
        credentials_key: str | None = None,
        refresh: bool = False,
        docker_credential: DockerCredential | None = None,
    ) -> ImageRegistration:
        """Register ``ref`` (again, with ``refresh``); does not wait for AVAILABLE.
        Credentials: the secret ``credentials_scope``/``credentials_key``, else
        ``docker_credential`` (stored as a secret first), else what ``docker login`` left
        on this machine, else none."""
        from . import _images

        return self._run(
            _images.register_image(
                self._core,
                ref,
                credentials_scope=credentials_scope,
                credentials_key=credentials_key,
                refresh=refresh,
                docker_credential=docker_credential,
            )
        )

    def get_image(self, ref: str) -> ImageRegistration | None:
        from . import _images

        return self._run(_images.get_image(self._core, ref))

    def wait_for_image(
        self,
        ref: str,
        *,
        timeout: float | None = None,
        poll_interval: float | None = None,
        on_update: Callable[[ImageRegistration], None] | None = None,
    ) -> ImageRegistration:
        """Wait until ``ref`` is AVAILABLE: ``ConfigurationError`` when it is not registered
        or its registration FAILED, ``RunTimeout`` after ``timeout`` seconds; ``on_update``
        sees each registration read."""
        from . import _images

        return self._run(
            _images.wait_for_image(
                self._core, ref, timeout=timeout, poll_interval=poll_interval, on_update=on_update
            )
        )

    def check_image_access(self, ref: str) -> bool | None:
        from . import _images

        return self._run(_images.check_image_access(self._core, ref))

    def ensure_images_registered(self, plan: SubmissionPlan) -> None:
        from . import _images

        self._run(_images.ensure_images_registered(self._core, plan.docker_images))

    # --- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self._identity_settled()
        self._http.close()

    def __enter__(self) -> AirClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncAirClient(_BaseClient, AsyncOperations):
    """Asynchronous twin of ``AirClient``: the same operations, awaited."""

    def __init__(
        self,
        host: str | None = None,
        token: str | None = None,
        *,
        credentials: Credentials | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        user_agent_extra: str | None = None,
        max_concurrent_uploads: int = _DEFAULT_CONCURRENT_UPLOADS,
        poll_interval: float = 5.0,
        host_source: str | None = None,
    ) -> None:
        super().__init__(
            host,
            token,
            credentials=credentials,
            timeout=timeout,
            retry=retry,
            user_agent_extra=user_agent_extra,
            max_concurrent_uploads=max_concurrent_uploads,
            poll_interval=poll_interval,
            host_source=host_source,
        )
        if transport is None:
            transport = httpx.AsyncHTTPTransport(
                verify=verify_for(self._core.host),
                limits=self._limits(),
                proxy=environment_proxy(self._core.host),
            )
        # Every request passes the budget transport, so a watcher's reads are admitted and
        # counted where they are sent (``_request_budget``). The proxy is the transport's:
        # httpx would route proxied requests past it (``trust_env``).
        self._http = httpx.AsyncClient(
            transport=BudgetedTransport(transport), timeout=self._core.timeout, trust_env=False
        )
        self._identity_ahead: asyncio.Task[None] | None = None  # see ``prefetch_identity``

    # --- driver -------------------------------------------------------------------------

    async def _perform(self, step: Step) -> Any:
        if isinstance(step, Transmit):
            return await self._http.send(step.request)
        if isinstance(step, AuthHeaders):
            return await self._core.credentials.aheaders()
        if isinstance(step, Sleep):
            if isinstance(step.wake, asyncio.Event):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(step.wake.wait(), step.seconds)
            else:
                await asyncio.sleep(step.seconds)
            return None
        if isinstance(step, Gather):
            return await self._gather(step)
        if isinstance(step, Offload):
            return await asyncio.to_thread(step.function)
        if isinstance(step, RefreshAuth):
            await self._core.credentials.arefresh()
            return None
        raise TypeError(f"unexpected step {step!r}")

    async def _gather(self, step: Gather) -> list[Any]:
        slots = asyncio.Semaphore(step.limit)

        async def run_one(flow: Flow[Any]) -> Any:
            async with slots:
                return await self._drive(flow)

        results = await asyncio.gather(*(run_one(f) for f in step.flows), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    async def _run(self, flow: Flow[T]) -> T:
        if self._identity_ahead is not None:  # a flow may need the identity being asked for
            await self._identity_settled()
        return await self._drive(flow)

    async def _drive(self, flow: Flow[T]) -> T:
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.throw(error) if error is not None else flow.send(answer)
            except StopIteration as stop:
                result: T = stop.value
                return result
            answer, error = None, None
            if isinstance(step, Emit):
                raise TypeError(f"flow emitted {step.item!r} but was run, not iterated")
            try:
                answer = await self._perform(step)
            except Exception as exc:
                error = exc

    async def _items(self, flow: Flow[Any]) -> AsyncIterator[Any]:
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.throw(error) if error is not None else flow.send(answer)
            except StopIteration:
                return
            answer, error = None, None
            if isinstance(step, Emit):
                yield step.item
                continue
            try:
                answer = await self._perform(step)
            except Exception as exc:
                error = exc

    async def run_flow(self, start: Callable[[ClientCore], Flow[T]]) -> T:
        """``AirClient.run_flow`` for async code."""
        return await self._run(start(self._core))

    # --- operations ---------------------------------------------------------------------

    def prefetch_identity(self) -> None:
        """``AirClient.prefetch_identity``, as a task of the running event loop."""
        if self._core.identity is not None or self._identity_ahead is not None:
            return
        self._identity_ahead = asyncio.get_running_loop().create_task(self._whoami_ahead())

    async def _whoami_ahead(self) -> None:
        try:
            await self._drive(_identity.whoami(self._core))
        except Exception as error:  # raised by the next whoami (``ClientCore.identity_error``)
            self._core.identity_error = error

    async def _identity_settled(self) -> None:
        ahead, self._identity_ahead = self._identity_ahead, None
        if ahead is not None:
            await ahead

    async def whoami(self) -> Identity:
        return await self._run(_identity.whoami(self._core))

    async def metastore_summary(self) -> dict[str, Any]:
        return await self._run(_identity.metastore_summary(self._core))

    async def submit(self, plan: SubmissionPlan) -> SubmittedRun:
        return await self._run(_submit.submit(self._core, plan))

    async def submit_workload(
        self,
        workload: Workload | Sequence[Stage],
        *,
        idempotency_token: str | None = None,
        run_name: str | None = None,
    ) -> SubmittedRun:
        return await self._run(
            _submit.submit_workload(
                self._core, workload, idempotency_token=idempotency_token, run_name=run_name
            )
        )

    async def get_run(self, run_id: int, *, include_history: bool = False) -> RunState:
        return await self._run(_runs.get_run(self._core, run_id, include_history=include_history))

    async def get_output(self, task_run_id: int) -> dict[str, Any]:
        return await self._run(_runs.get_output(self._core, task_run_id))

    async def list_runs(
        self, active_only: bool = True, limit: int = 25, page_token: str | None = None
    ) -> tuple[list[RunState], str | None]:
        return await self._run(
            _runs.list_runs(self._core, active_only=active_only, limit=limit, page_token=page_token)
        )

    async def list_runs_raw(self, params: dict[str, Any]) -> dict[str, Any]:
        """One ``runs/list`` page as the API answered it (the watcher reads it lazily)."""
        return await self._run(_runs.list_runs_raw(self._core, params))

    async def wait(
        self,
        run_id: int,
        policy: WaitPolicy | None = None,
        *,
        poll_interval: float | None = None,
        on_update: Callable[[RunState], None] | None = None,
        on_retry: Callable[[RetryDecision], None] | None = None,
        **options: Any,
    ) -> RunState:
        return await self._run(
            _runs.wait(
                self._core,
                run_id,
                WaitPolicy.of(policy, **options),
                poll_interval=self.poll_interval if poll_interval is None else poll_interval,
                on_update=on_update,
                on_retry=on_retry,
            )
        )

    async def raise_for_failure(self, state: RunState) -> None:
        await self._run(_runs.raise_for_failure(self._core, state))

    async def run_result(self, state: RunState) -> RunResult:
        return await self._run(_runs.run_result(self._core, state))

    async def cancel(self, run_id: int, *, cause: CancelCause | None = None) -> None:
        await self._run(_cancel_causes.cancel_with_cause(self._core, run_id, cause))

    async def sweep_spend(self, sweep: Sweep) -> SweepSpend:
        return await self._run(_runs.sweep_spend(self._core, sweep))

    async def iter_logs(
        self,
        run_id: int,
        *,
        node: int = 0,
        follow: bool = False,
        until: asyncio.Event | None = None,
    ) -> AsyncIterator[LogRecord]:
        async for record in self._items(
            _runs.iter_logs(self._core, run_id, node=node, follow=follow, until=until)
        ):
            yield record

    async def iter_run_logs(
        self,
        run_id: int,
        *,
        task_key: str | None = None,
        node: int | None = None,
        follow: bool = False,
        until: asyncio.Event | None = None,
    ) -> AsyncIterator[LogRecord]:
        async for record in self._items(
            _runs.iter_run_logs(
                self._core, run_id, task_key=task_key, node=node, follow=follow, until=until
            )
        ):
            yield record

    async def read_newest_lines(self, stream: LineStream, count: int) -> LiveLines | None:
        """At most ``count`` unread records of one running stream, the newest (see
        ``_live_lines``); None when the workspace serves no logs."""
        from . import _live_lines  # a waiter's, never a submitting task's

        return await self._run(_live_lines.read_newest(self._core, stream, count))

    async def ensure_secret_scope(self, scope: str) -> None:
        await self._run(_secrets.ensure_secret_scope(self._core, scope))

    async def put_secret(self, scope: str, key: str, value: str) -> None:
        await self._run(_secrets.put_secret(self._core, scope, key, value))

    async def materialize_secrets(
        self, values: Mapping[str, str], *, scope: str, key_prefix: str = ""
    ) -> dict[str, str]:
        return await self._run(
            _secrets.materialize_secrets(self._core, values, scope=scope, key_prefix=key_prefix)
        )

    async def list_secrets(self, scope: str) -> list[SecretInfo]:
        return await self._run(_secrets.list_secrets(self._core, scope))

    async def store_submission_secrets(
        self, secrets: SubmissionSecrets, values: Mapping[str, str], stage: str | None = None
    ) -> dict[str, str]:
        return await self._run(
            _secrets.store_submission_secrets(self._core, secrets, values, stage)
        )

    async def mark_submission_run(self, secrets: SubmissionSecrets, run_id: int) -> None:
        await self._run(_secrets.mark_submission_run(self._core, secrets, run_id))

    async def delete_submission_secrets(self, secrets: SubmissionSecrets) -> int:
        return await self._run(_secrets.delete_submission_secrets(self._core, secrets))

    async def sweep_ended_submissions(self, secrets: SubmissionSecrets) -> int:
        return await self._run(_secrets.sweep_ended_submissions(self._core, secrets))

    async def prune_submission_secrets(
        self, scope: str, *, older_than_s: float, now_ms: int, dry_run: bool = False
    ) -> PruneResult:
        return await self._run(
            _secrets.prune_submission_secrets(
                self._core, scope, older_than_s=older_than_s, now_ms=now_ms, dry_run=dry_run
            )
        )

    async def register_image(
        self,
        ref: str,
        *,
        credentials_scope: str | None = None,
        credentials_key: str | None = None,
        refresh: bool = False,
        docker_credential: DockerCredential | None = None,
    ) -> ImageRegistration:
        """Register ``ref`` (again, with ``refresh``); does not wait for AVAILABLE.
        Credentials: the secret ``credentials_scope``/``credentials_key``, else
        ``docker_credential`` (stored as a secret first), else what ``docker login`` left
        on this machine, else none."""
        from . import _images

        return await self._run(
            _images.register_image(
                self._core,
                ref,
                credentials_scope=credentials_scope,
                credentials_key=credentials_key,
                refresh=refresh,
                docker_credential=docker_credential,
            )
        )

    async def get_image(self, ref: str) -> ImageRegistration | None:
        from . import _images

        return await self._run(_images.get_image(self._core, ref))

    async def wait_for_image(
        self,
        ref: str,
        *,
        timeout: float | None = None,
        poll_interval: float | None = None,
        on_update: Callable[[ImageRegistration], None] | None = None,
    ) -> ImageRegistration:
        """Wait until ``ref`` is AVAILABLE: ``ConfigurationError`` when it is not registered
        or its registration FAILED, ``RunTimeout`` after ``timeout`` seconds; ``on_update``
        sees each registration read."""
        from . import _images

        return await self._run(
            _images.wait_for_image(
                self._core, ref, timeout=timeout, poll_interval=poll_interval, on_update=on_update
            )
        )

    async def check_image_access(self, ref: str) -> bool | None:
        from . import _images

        return await self._run(_images.check_image_access(self._core, ref))

    async def ensure_images_registered(self, plan: SubmissionPlan) -> None:
        from . import _images

        await self._run(_images.ensure_images_registered(self._core, plan.docker_images))

    # --- lifecycle ----------------------------------------------------------------------

    async def aclose(self) -> None:
        await self._identity_settled()
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAirClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

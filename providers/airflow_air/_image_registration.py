"""One try of an ``AirRegisterImageOperator``: register a Docker Hub image and wait until
it is AVAILABLE, in the worker or in the triggerer (``AirImageTrigger``).

Only imported from ``execute`` (it pulls in the core client).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from air_runtime import ConfigurationError, DockerCredential, normalize_docker_ref
from airflow_air._deferral import (
    configuration_errors_fail_fast,
    defer_timeout,
    first_poll_at,
    poll_interval_of,
    try_deadline,
)
from airflow_air.exceptions import AirConfigurationError
from airflow_air.hooks import AirHook

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_air.operators import AirRegisterImageOperator


class AirImageRegistration:
    def __init__(self, task: AirRegisterImageOperator, context: Context) -> None:
        self.task = task
        self.context = context

    def _connection_credential(self) -> DockerCredential | None:
        """The registry login of ``docker_conn_id`` (the core stores it as a secret)."""
        task = self.task
        if (task.credentials_scope is None) != (task.credentials_key is None):
            raise AirConfigurationError("credentials_scope and credentials_key go together")
        if task.docker_conn_id is None:
            return None
        from airflow.sdk import BaseHook
        from airflow.sdk.log import mask_secret

        conn = BaseHook.get_connection(task.docker_conn_id)
        password = conn.password or (conn.extra_dejson or {}).get("token")
        if not conn.login or not password:
            raise AirConfigurationError(
                f"connection {task.docker_conn_id!r} needs the Docker Hub user in login and a "
                "password or access token in password"
            )
        mask_secret(password)
        credential = DockerCredential(
            registry="docker.io",
            username=conn.login,
            password=password,
            origin=f"airflow-{task.docker_conn_id}",
        )
        mask_secret(credential.secret_value())
        task.redactor().add(password, credential.secret_value())
        return credential

    def execute(self) -> Any:
        task = self.task
        with (
            configuration_errors_fail_fast(lambda text: task.redactor()(text)),
            AirHook(task.databricks_conn_id).get_client() as client,
        ):
            task.redactor().include(client.redactor)
            if task.catalog is not None and task.schema is not None:
                from airflow_air._unity_catalog_images import push_to_unity_catalog

                return push_to_unity_catalog(
                    task,
                    self.context,
                    client,
                    source=task.image,
                    catalog=task.catalog,
                    schema=task.schema,
                    artifact=task.artifact,
                    registry_host=task.registry_host,
                    credential=self._connection_credential(),
                )
            try:
                image = normalize_docker_ref(task.image)
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from exc
            self.context["ti"].xcom_push(key="image", value=image)
            existing = client.get_image(image)
            if existing is not None and existing.is_available and not task.refresh:
                task.log.info("%s is already AVAILABLE; nothing to do", image)
                return existing.digest
            if existing is not None and existing.state in ("PENDING", "IMPORTING"):
                task.log.info("%s is being registered (%s); waiting", image, existing.state)
                registration = existing
            else:
                registration = client.register_image(
                    image,
                    credentials_scope=task.credentials_scope,
                    credentials_key=task.credentials_key,
                    refresh=True,
                    docker_credential=self._connection_credential(),
                )
                task.log.info("Registered %s: %s", image, registration.state)
                if registration.is_available:
                    return registration.digest
            if task.deferrable:
                if registration.state == "FAILED":  # ended already: no deferral, same outcome
                    reason = registration.status_message or "no reason given"
                    return self.resume(
                        {
                            "status": "failed",
                            "image": image,
                            "state": registration.state,
                            "message": f"registration FAILED: {reason}",
                        }
                    )
                self._defer(image, poll_interval_of(task, client))
            done = client.wait_for_image(
                image, timeout=task.timeout, poll_interval=poll_interval_of(task, client)
            )
            task.log.info("%s is AVAILABLE (%s)", image, done.digest)
            return done.digest

    def _defer(self, image: str, poll_interval: float) -> None:
        from airflow_air.triggers import AirImageTrigger

        task = self.task
        deadline = time.time() + task.timeout
        task_deadline = try_deadline(task, self.context)
        if task_deadline is not None:
            deadline = min(deadline, task_deadline)
        task.defer(
            trigger=AirImageTrigger(
                image,
                databricks_conn_id=task.databricks_conn_id,
                poll_interval=poll_interval,
                deadline=deadline,
                first_poll_at=first_poll_at(),
            ),
            method_name="execute_complete",
            timeout=defer_timeout(deadline),
        )

    def resume(self, event: Mapping[str, Any] | None) -> Any:
        from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

        event = dict(event or {})
        status = event.get("status")
        if status == "success":
            self.task.log.info("%s is AVAILABLE (%s)", event.get("image"), event.get("digest"))
            return event.get("digest")
        message = self.task.redactor()(f"{event.get('image')}: {event.get('message') or status}")
        if status == "failed":
            raise AirConfigurationError(message)
        if status == "timeout":
            raise AirflowTaskTimeout(message)
        raise AirflowException(message)

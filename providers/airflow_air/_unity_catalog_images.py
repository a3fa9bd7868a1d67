"""``AirRegisterImageOperator``'s Unity Catalog target: the source image is copied registry
to registry into the workspace's Artifact Registry by the core (``air_runtime.images``), in
the worker (a copy moves data, there is nothing to defer), and the operator returns the
``unity_catalog_image`` reference as its XCom for a downstream ``AirRunOperator``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    from air_runtime import AirClient, DockerCredential


def push_to_unity_catalog(
    task: BaseOperator,
    context: Context,
    client: AirClient,
    *,
    source: str,
    catalog: str,
    schema: str,
    artifact: str | None,
    registry_host: str | None,
    credential: DockerCredential | None,
) -> str:
    """Copy ``source`` to ``<catalog>.<schema>.<artifact>`` and return that reference;
    XCom ``digest`` holds the manifest digest (the source's linux/amd64 one)."""
    from air_runtime.images import CopyProgress, Login, push_image

    def log_progress(event: CopyProgress) -> None:
        if event.event in ("exists", "mounted", "uploaded"):
            task.log.info(
                "[%d/%d] %s %s; %d of %d bytes sent",
                event.layers_done,
                event.layers_total,
                event.digest,
                event.event,
                event.bytes_sent,
                event.bytes_total,
            )
        elif event.event == "up-to-date":
            task.log.info("the Artifact Registry has %s already: nothing sent", event.digest)

    login = (
        Login(credential.username, credential.password, origin=credential.origin)
        if credential is not None
        else None
    )
    pushed = push_image(
        client,
        source,
        catalog=catalog,
        schema=schema,
        artifact=artifact or None,
        registry_host=registry_host or None,
        source_credentials=login,
        progress=log_progress,
    )
    ti: Any = context["ti"]
    ti.xcom_push(key="digest", value=pushed.digest)
    ti.xcom_push(key="image", value=pushed.copy.source)
    task.log.info(
        "Copied %s to %s (%s, %d bytes sent)",
        pushed.copy.source,
        pushed.unity_catalog_image,
        pushed.digest,
        pushed.copy.bytes_sent,
    )
    return pushed.unity_catalog_image

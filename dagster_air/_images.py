"""An asset that registers Docker Hub images with the workspace (docs/spec/rest-api.md §4), so the
workloads that use them can be submitted."""

# No `from __future__ import annotations`: Dagster reads the op signature at runtime.

from collections.abc import Sequence

import dagster as dg

from air_runtime import AirError, ConfigurationError, WorkloadError

from ._translator import META_PREFIX


def build_image_registration_asset(
    images: Sequence[str],
    *,
    key: str | Sequence[str] = "air_images",
    group_name: str | None = None,
    resource_key: str = "air_workspace",
    refresh: bool = False,
    timeout: float = 3600.0,
    poll_interval: float = 5.0,
) -> dg.AssetsDefinition:
    """One asset that registers ``images`` and waits until each is ``AVAILABLE``.

    Registration is idempotent: an image already ``AVAILABLE`` is not registered again
    unless ``refresh=True`` (to pick up a re-pushed tag). Private images use the Docker
    login found on the machine (``~/.docker/config.json``), stored as a workspace secret
    by the core client. Make workload assets depend on this asset.
    """
    if not images:
        raise dg.DagsterInvalidDefinitionError("build_image_registration_asset needs images")

    @dg.asset(
        key=dg.AssetKey.from_coercible(key),
        group_name=group_name,
        kinds={"databricks", "docker"},
        required_resource_keys={resource_key},
        description="Registers Docker Hub images with the Databricks workspace: "
        + ", ".join(images),
    )
    def _register_images(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        workspace = getattr(context.resources, resource_key)
        metadata = {}
        with workspace.get_client() as client:
            for image in images:
                try:
                    client.register_image(image, refresh=refresh)
                    registration = client.wait_for_image(
                        image, timeout=timeout, poll_interval=poll_interval
                    )
                except (ConfigurationError, WorkloadError) as error:
                    raise dg.Failure(
                        description=client.redactor(f"cannot register {image}: {error}"),
                        allow_retries=False,
                    ) from None
                except AirError as error:
                    raise dg.Failure(
                        description=client.redactor(f"cannot register {image}: {error}")
                    ) from None
                context.log.info(f"{registration.docker_image_url} is {registration.state}")
                metadata[f"{META_PREFIX}image/{registration.docker_image_url}"] = (
                    registration.manifest_sha256 or registration.state
                )
        return dg.MaterializeResult(metadata=metadata)

    return _register_images

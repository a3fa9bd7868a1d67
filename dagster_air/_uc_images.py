"""An asset that copies images into Unity Catalog (the workspace's Databricks Artifact
Registry), registry to registry and without Docker, through the core (``air_runtime.images``),
and records each ``unity_catalog_image`` and manifest digest as metadata."""

# No `from __future__ import annotations`: Dagster reads the op signature at runtime.

from collections.abc import Mapping, Sequence

import dagster as dg

from air_runtime import AirError, AuthError, ConfigurationError, NotFound

from ._translator import META_PREFIX


def build_unity_catalog_image_asset(
    images: Sequence[str] | Mapping[str, str | None],
    *,
    catalog: str,
    schema: str,
    registry_host: str | None = None,
    key: str | Sequence[str] = "air_images",
    group_name: str | None = None,
    resource_key: str = "air_workspace",
) -> dg.AssetsDefinition:
    """One asset that copies each source image to ``<catalog>.<schema>.<artifact>``.

    ``images`` lists sources (Docker Hub by default, any registry; logins from
    ``~/.docker/config.json``), or maps each source to ``NAME[:TAG]`` (default: the
    source's name and tag). A copy the registry has already sends nothing. Metadata:
    ``dagster-air/unity_catalog_image/<source>`` (the reference workloads run) and
    ``dagster-air/digest/<reference>``. Make workload assets depend on this asset.
    """
    targets = dict(images) if isinstance(images, Mapping) else dict.fromkeys(images)
    if not targets:
        raise dg.DagsterInvalidDefinitionError("build_unity_catalog_image_asset needs images")
    # The names first: a bad catalog, schema or artifact fails the definitions, not a run.
    from air_runtime.images import parse_source_image, unity_catalog_image

    try:
        for source, artifact in targets.items():
            unity_catalog_image(catalog, schema, artifact, source=parse_source_image(source))
    except ConfigurationError as error:
        raise dg.DagsterInvalidDefinitionError(str(error)) from None

    @dg.asset(
        key=dg.AssetKey.from_coercible(key),
        group_name=group_name,
        kinds={"databricks", "docker"},
        required_resource_keys={resource_key},
        description=f"Copies images into Unity Catalog {catalog}.{schema}: " + ", ".join(targets),
    )
    def _copy_images(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from air_runtime.images import push_image

        workspace = getattr(context.resources, resource_key)
        metadata: dict[str, str] = {}
        with workspace.get_client() as client:
            for source, artifact in targets.items():
                try:
                    pushed = push_image(
                        client,
                        source,
                        catalog=catalog,
                        schema=schema,
                        artifact=artifact,
                        registry_host=registry_host,
                    )
                except (ConfigurationError, AuthError, NotFound) as error:
                    raise dg.Failure(
                        description=client.redactor(f"cannot copy {source}: {error}"),
                        allow_retries=False,
                    ) from None
                except AirError as error:
                    raise dg.Failure(
                        description=client.redactor(f"cannot copy {source}: {error}")
                    ) from None
                context.log.info(
                    f"{source} is {pushed.unity_catalog_image} ({pushed.digest}; "
                    f"{pushed.copy.bytes_sent} bytes sent)"
                )
                metadata[f"{META_PREFIX}unity_catalog_image/{source}"] = pushed.unity_catalog_image
                metadata[f"{META_PREFIX}digest/{pushed.unity_catalog_image}"] = pushed.digest
        return dg.MaterializeResult(metadata=metadata)

    return _copy_images

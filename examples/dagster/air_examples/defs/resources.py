"""The workspace: the local one when AIRO_HOST is set, else DATABRICKS_HOST/DATABRICKS_TOKEN
(or any databricks-sdk configuration)."""

import os

import dagster as dg

from dagster_air import AirWorkspace


def workspace() -> AirWorkspace:
    if os.environ.get("AIRO_HOST"):
        return AirWorkspace(host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"))
    return AirWorkspace()  # the databricks-sdk default chain


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"air_workspace": workspace()})

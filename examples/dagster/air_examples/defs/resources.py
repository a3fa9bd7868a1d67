"""The workspace: DATABRICKS_HOST/DATABRICKS_TOKEN (the local one too: its host and token), or
any other databricks-sdk configuration. ``airo`` reads the same variables."""

import dagster as dg

from dagster_air import AirWorkspace


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"air_workspace": AirWorkspace()})

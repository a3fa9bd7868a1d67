"""Extra links of the AI Runtime operators: the run page and the MLflow run.

Airflow 3 shows a link from the XCom stored under the link's ``xcom_key``. The operators push
that XCom themselves right after submitting, so the run page link works while the task is
still running or deferred, not only once it finished.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

RUN_ID_KEY = "run_id"
RUN_PAGE_URL_KEY = "run_page_url"
MLFLOW_URL_KEY = "mlflow_run_url"
GPU_HOURS_KEY = "gpu_hours"  # not a link: an XCom pushed beside the run's, also on failure


# The operator attribute holding the links' URLs of the try that runs (see ``remember_url``).
LINK_URLS_ATTR = "air_link_urls"


def remember_url(operator: object, key: str, url: str) -> None:
    """Keep a link's URL on the running operator as well as in XCom.

    When a try ends, Airflow asks every extra link of the operator for its URL (to store it
    for the UI). Read from XCom, a try that failed before it submitted anything (an invalid
    workload, a missing connection) made Airflow log an "XCom not found" error per link; read
    from the operator, there is simply no URL yet.
    """
    urls = getattr(operator, LINK_URLS_ATTR, None)
    if isinstance(urls, dict):
        # A new dict, not an update: a try runs a shallow copy of the Dag's operator.
        setattr(operator, LINK_URLS_ATTR, {**urls, key: url})


def _url(operator: BaseOperator, ti_key: TaskInstanceKey, key: str) -> str:
    urls = getattr(operator, LINK_URLS_ATTR, None)
    if isinstance(urls, dict):  # the operator that ran this try
        return str(urls.get(key, ""))
    return _xcom(ti_key, key)


def _xcom(ti_key: TaskInstanceKey, key: str) -> str:
    from airflow.sdk.execution_time.xcom import XCom

    value = XCom.get_value(ti_key=ti_key, key=key)
    return value if isinstance(value, str) else ""


class AirRunLink(BaseOperatorLink):
    """The AI Runtime run page of the task's run."""

    name = "AI Runtime run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _url(operator, ti_key, RUN_PAGE_URL_KEY)


class AirMlflowRunLink(BaseOperatorLink):
    """The MLflow run the workload logged to, once the platform reports its ids."""

    name = "MLflow run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _url(operator, ti_key, MLFLOW_URL_KEY)

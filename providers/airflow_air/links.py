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


def _xcom(ti_key: TaskInstanceKey, key: str) -> str:
    from airflow.sdk.execution_time.xcom import XCom

    value = XCom.get_value(ti_key=ti_key, key=key)
    return value if isinstance(value, str) else ""


class AirRunLink(BaseOperatorLink):
    """The AI Runtime run page of the task's run."""

    name = "AI Runtime run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _xcom(ti_key, RUN_PAGE_URL_KEY)


class AirMlflowRunLink(BaseOperatorLink):
    """The MLflow run the workload logged to, once the platform reports its ids."""

    name = "MLflow run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _xcom(ti_key, MLFLOW_URL_KEY)



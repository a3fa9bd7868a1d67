"""Extra links of the AI Runtime operators: the run page and the MLflow run.

Airflow 3 shows a link from the XCom stored under the link's ``xcom_key``. Each link's key is
the result XCom that holds its URL (``run_page_url``, ``mlflow_run_url``), so one XCom serves
both the link and the users who pull it. The operators push the run page right after
submitting, so the link works while the task is still running or deferred, not only once it
finished.

A try writes each link's XCom once, and only once its URL is known: when a worker run ends,
Airflow writes the XCom of every link of ``operator_extra_links`` (``task_runner.finalize``),
so the running operator keeps there only the links whose URL it has and no XCom holds yet
(``airflow_air._task_run.TaskRun.remember_url``). Otherwise a deferring try would write an empty MLflow link, a resumed
one both links again, and a try that only cancels (Airflow's ``__fail__``) would blank the
run page its deferring part had written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

    from air_runtime import RunOutcome

RUN_ID_KEY = "run_id"
RUN_PAGE_URL_KEY = "run_page_url"
MLFLOW_URL_KEY = "mlflow_run_url"
GPU_HOURS_KEY = "gpu_hours"  # not a link: an XCom pushed beside the run's, also on failure


# The operator attribute holding the URLs the running try has for Airflow to write as the
# worker run ends (kept by ``airflow_air._task_run.TaskRun.remember_url``).
LINK_URLS_ATTR = "air_link_urls"


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

    xcom_key = RUN_PAGE_URL_KEY  # the result XCom that holds the URL

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _url(operator, ti_key, RUN_PAGE_URL_KEY)


class AirMlflowRunLink(BaseOperatorLink):
    """The MLflow run the workload logged to, once the platform reports its ids."""

    name = "MLflow run"

    xcom_key = MLFLOW_URL_KEY  # the result XCom that holds the URL

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _url(operator, ti_key, MLFLOW_URL_KEY)


# --- the XComs a try pushes -----------------------------------------------------------------


def outcome_xcoms(outcome: RunOutcome) -> dict[str, Any]:
    """The XComs a try leaves once its run (stage) ended, beside the return value: the
    MLflow run (also the link's ``xcom_key``) once its ids are known, and the GPU-hours, also
    when the run failed (the accelerators were held all the same). The run id and page were
    written when the run was submitted (``TaskRun.push_run_xcoms``; a deferring try's run page by
    Airflow's end-of-try link write)."""
    xcoms: dict[str, Any] = {}
    if outcome.mlflow_run_url:
        xcoms[MLFLOW_URL_KEY] = outcome.mlflow_run_url
    if outcome.gpu_hours is not None:
        xcoms[GPU_HOURS_KEY] = outcome.gpu_hours
    return xcoms


def return_value(outcome: RunOutcome) -> dict[str, Any]:
    """The operator's return value (XCom ``return_value``)."""
    out: dict[str, Any] = {
        "run_id": outcome.run_id,
        "run_page_url": outcome.run_page_url,
        "result_state": outcome.result_state,
        "mlflow_experiment_id": outcome.mlflow_experiment_id,
        "mlflow_run_id": outcome.mlflow_run_id,
        "gpu_hours": outcome.gpu_hours,
    }
    if outcome.task_key:
        out["task_key"] = outcome.task_key
    return out


def success_xcoms(outcome: RunOutcome, *, push_return_value: bool = True) -> dict[str, Any]:
    """The XComs a trigger that ends the task itself leaves (``airflow_air.triggers``): what
    ``TaskRun.push_outcome_xcoms`` and the return value leave when the task ends in a worker. The
    try that deferred wrote the run id and page."""
    from airflow.sdk.bases.xcom import BaseXCom

    xcoms = outcome_xcoms(outcome)
    if push_return_value:
        xcoms[BaseXCom.XCOM_RETURN_KEY] = return_value(outcome)
    return xcoms

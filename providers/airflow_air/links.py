"""Extra links of the AI Runtime operators: the run page and the MLflow run.

Airflow 3 shows a link from the XCom stored under the link's ``xcom_key``. Each link's key is
the result XCom that holds its URL (``run_page_url``, ``mlflow_run_url``), so one XCom serves
both the link and the users who pull it. The operators push the run page right after
submitting and the MLflow run as soon as the run's task has one
(``air_runtime.MlflowLinkReader``), so the links work while the task is still running or deferred, not only once it finished.

A try writes each XCom once, and only once its value is known (``LinkXComs``): when a worker
run ends, Airflow writes the XCom of every link of ``operator_extra_links``
(``task_runner.finalize``), so the running operator offers there only the links whose URL it
has and no XCom holds yet. Otherwise a deferring try would write an empty MLflow link, a
resumed one both links again, and a try that only cancels (Airflow's ``__fail__``) would
blank the run page its deferring part had written.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
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
# Not a link: what the GPU-hours cost at the connection's prices ({"amount", "currency"}).
COST_KEY = "cost"
CHECKPOINT_DIR_KEY = "checkpoint_dir"  # not a link: the task's checkpoint folder, when any
# Not a link: the newest checkpoint in that folder when the try's run ended (path and step).
CHECKPOINT_KEY = "checkpoint"

# The event key of a trigger's ``LinkXComs`` (``to_event``); ``run_xcoms_pending`` is also
# what events stored by earlier versions carry.
_WRITTEN_EVENT_KEY = "xcoms_written"
_PENDING_EVENT_KEY = "run_xcoms_pending"


class LinkXComs:
    """The XComs of one try's run and links, each written once, by whoever knows the value
    first. A try's operator holds one (``try_run.links``), and so does a trigger.

    - ``push``: write XComs now, except those this try has written with the same value;
    - ``leave``: let Airflow write a link's XCom as this worker run ends (a worker run that
      ends within moments saves a request); ``offered`` is then what the running operator's
      ``operator_extra_links`` keeps, so Airflow writes no other link of ours;
    - ``run_pending``: a trigger submitted the run and could not write its id and page, so
      whoever ends the task writes them.

    A trigger's event carries what the trigger wrote (``to_event``, ``from_event``): the
    worker that resumes writes only the rest.
    """

    def __init__(
        self, written: Mapping[str, Any] | None = None, *, run_pending: bool = False
    ) -> None:
        self.written: dict[str, Any] = dict(written or {})
        self.run_pending = run_pending
        self._left: dict[str, str] = {}

    def unwritten(self, xcoms: Mapping[str, Any]) -> dict[str, Any]:
        """``xcoms`` without those this try wrote with the same value."""
        return {k: v for k, v in xcoms.items() if k not in self.written or self.written[k] != v}

    def wrote(self, xcoms: Mapping[str, Any]) -> None:
        """``xcoms`` were written (by a trigger, through the execution API)."""
        self.written.update(xcoms)
        for key in xcoms:
            self._left.pop(key, None)
        if RUN_ID_KEY in xcoms:
            self.run_pending = False

    def push(self, ti: Any, xcoms: Mapping[str, Any]) -> None:
        """Write ``xcoms`` from a worker, but those written already."""
        fresh = self.unwritten(xcoms)
        for key, value in fresh.items():
            ti.xcom_push(key=key, value=value)
        self.wrote(fresh)

    def leave(self, key: str, url: str) -> None:
        """Leave the link's XCom to Airflow's write as this worker run ends."""
        if url and self.written.get(key) != url:
            self._left[key] = url

    def url(self, key: str) -> str:
        """The URL Airflow writes for the link ``key`` as this worker run ends ("": none)."""
        return self._left.get(key, "")

    def offered(self, links: Collection[BaseOperatorLink]) -> tuple[BaseOperatorLink, ...]:
        """Of ``links``, ours whose URL is left to Airflow, and any other (a subclass's own)."""
        return tuple(
            link
            for link in links
            if not isinstance(link, AirRunLink | AirMlflowRunLink) or link.xcom_key in self._left
        )

    def to_event(self) -> dict[str, Any]:
        event: dict[str, Any] = {}
        if self.written:
            event[_WRITTEN_EVENT_KEY] = dict(self.written)
        if self.run_pending:
            event[_PENDING_EVENT_KEY] = True
        return event

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> LinkXComs:
        written = event.get(_WRITTEN_EVENT_KEY)
        return cls(
            written if isinstance(written, Mapping) else None,
            run_pending=bool(event.get(_PENDING_EVENT_KEY)),
        )


_NOT_OURS = object()


def _url(operator: BaseOperator, ti_key: TaskInstanceKey, key: str) -> str:
    try_run: Any = getattr(operator, "try_run", _NOT_OURS)
    if try_run is _NOT_OURS:
        return _xcom(ti_key, key)
    # An operator of ours that runs a try (None: it has not started one, so no URL).
    return str(try_run.links.url(key)) if try_run is not None else ""


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
    Airflow's end-of-try link write), the MLflow run perhaps while it ran (``LinkXComs``
    leaves out what was written)."""
    xcoms: dict[str, Any] = {}
    if outcome.mlflow_run_url:
        xcoms[MLFLOW_URL_KEY] = outcome.mlflow_run_url
    if outcome.gpu_hours is not None:
        xcoms[GPU_HOURS_KEY] = outcome.gpu_hours
    if outcome.cost is not None:
        xcoms[COST_KEY] = {"amount": outcome.cost, "currency": outcome.currency}
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
    if outcome.cost is not None:
        out["cost"], out["currency"] = outcome.cost, outcome.currency
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

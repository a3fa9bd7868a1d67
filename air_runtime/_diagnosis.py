"""Why a run failed, in one line: the failure signature of its nodes' last lines, the exit
code that means a kill, or the platform's termination reason.

Our table of fatal log signatures follows the ones the ``databricks air`` CLI flags as ALERT
lines (databricks/cli ``experimental/air/cmd/logdetect.go``, fatalPatterns: CUDA and host
out-of-memory, NCCL and collective timeouts, CUDA errors, segfaults, torch.distributed and
store timeouts, GPU Xid faults, streaming dataset errors, an MLflow stall, the launcher's
"Script failed with exit code" line and a missing command), each with what to do and whether
a retry can help. The termination reason is the Jobs API's ``status.termination_details``
(``code``, ``type``, ``message``) of the run or its task, which ``databricks air get`` shows.

Every diagnosis has a class (``FailureClass``) that the retry policy (``_retry_policy``)
maps to what happens next: *infrastructure* (a node lost or preempted, the network between
nodes, a GPU's hardware, capacity: another attempt on other hosts may well succeed),
*deterministic* (out of memory, a missing command or module, a syntax error, a bad argument:
the same code and data fail the same way) or *unknown* (everything else). The platform's own
state message of the attempt is read first: when it says a node was lost or preempted, that is
the cause, whatever the other nodes logged while they waited on it.

Pure functions of what the client read; the failure message (``_states.failure_message``)
puts the diagnosis on its first line, so every surface that shows it names the cause first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ._checkpoints import Checkpoint

# The launcher's line on the node whose command failed (logdetect.go's last pattern).
_SCRIPT_FAILED = re.compile(r"ERROR: Script failed with exit code ([1-9]\d*) after \d+s")


class FailureClass(StrEnum):
    """What another attempt of the same code can expect (see the module docstring)."""

    INFRASTRUCTURE = "infrastructure"
    DETERMINISTIC = "deterministic"
    UNKNOWN = "unknown"


INFRASTRUCTURE = FailureClass.INFRASTRUCTURE
DETERMINISTIC = FailureClass.DETERMINISTIC
UNKNOWN = FailureClass.UNKNOWN


@dataclass(frozen=True, slots=True)
class Signature:
    """A fatal failure recognised by a log line (or by the platform's state message)."""

    cause: str  # what happened, for the headline: "CUDA out of memory"
    patterns: tuple[re.Pattern[str], ...]
    advice: str  # what to do about it
    failure_class: FailureClass

    @property
    def deterministic(self) -> bool:
        """The same code and data fail the same way: retries will not help."""
        return self.failure_class is DETERMINISTIC


def _any(*patterns: str, flags: int = 0) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, flags) for p in patterns)


# Most specific first: a line that matches several signatures is the first one's.
SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "CUDA out of memory",
        _any(
            r"CUDA out of memory",
            r"CUDA error: out of memory",
            r"composer.*OutOfMemory",
            flags=re.IGNORECASE,
        )
        + _any(r"torch\.(cuda\.)?OutOfMemoryError"),
        "reduce the batch size or use more accelerators",
        DETERMINISTIC,
    ),
    Signature(
        "host out of memory (the kernel's OOM killer stopped the process)",
        _any(r"Out of memory: Kill(ed)? process", r"^\s*Killed\s*$", flags=re.IGNORECASE),
        "use less host memory (fewer data loader workers, smaller prefetch) or more nodes",
        DETERMINISTIC,
    ),
    Signature(
        "illegal memory access on the GPU",
        _any(r"an illegal memory access was encountered", flags=re.IGNORECASE),
        "a kernel read or wrote out of bounds: rerun with CUDA_LAUNCH_BLOCKING=1 to find it",
        DETERMINISTIC,
    ),
    Signature(
        "Python import error",
        _any(r"\b(?:ModuleNotFoundError|ImportError): "),
        "install the missing package in the image or the environment's dependencies, or fix "
        "the import",
        DETERMINISTIC,
    ),
    Signature(
        "Python syntax error",
        _any(r"^\s*(?:SyntaxError|IndentationError|TabError): "),
        "fix the syntax error in the file the traceback names",
        DETERMINISTIC,
    ),
    Signature(
        "bad command-line argument",
        _any(
            r"error: unrecognized arguments: ",
            r"error: the following arguments are required: ",
            r"error: argument [-\w/ ]+: (?:invalid|expected)",
        ),
        "fix the command's arguments (the usage line above lists them)",
        DETERMINISTIC,
    ),
    Signature(
        "NCCL collective operation timed out",
        _any(r"Watchdog caught collective operation timeout"),
        "a rank stalled or died before the collective: read the other nodes' last lines",
        INFRASTRUCTURE,
    ),
    Signature(
        "NCCL network error",
        _any(
            r"NCCL WARN .*(Conn|Net|IB|timeout|unhandled)",
            r"Got async error event",
            r"transport/net_ib\.cc:\d+.*WARN",
            flags=re.IGNORECASE,
        ),
        "the network between nodes failed; a retry on other hosts may help",
        INFRASTRUCTURE,
    ),
    Signature(
        "GPU hardware fault",
        _any(r"Xid.*\b(48|63|64|79|94|95)\b"),
        "a GPU failed (driver Xid); a retry on other hardware may help",
        INFRASTRUCTURE,
    ),
    Signature(
        "CUDA error",
        _any(
            r"CUDA(?: runtime)? error",
            r"CUDA kernel errors might be asynchronously reported",
            flags=re.IGNORECASE,
        ),
        "read the CUDA error above; rerun with CUDA_LAUNCH_BLOCKING=1 to locate it",
        UNKNOWN,
    ),
    Signature(
        "segmentation fault",
        _any(r"segmentation fault", flags=re.IGNORECASE),
        "a native library crashed: check library and driver versions of the image",
        UNKNOWN,
    ),
    Signature(
        "distributed rendezvous timed out",
        _any(r"(?:TCPStore|Store).*timed?\s*out", flags=re.IGNORECASE),
        "not every rank reached the rendezvous: read the other nodes' last lines",
        INFRASTRUCTURE,
    ),
    Signature(
        "torch.distributed error",
        _any(r"torch\.distributed\..*(?:Error|Exception)"),
        "read the distributed error above and the other nodes' last lines",
        UNKNOWN,
    ),
    Signature(
        "Composer error",
        _any(r"composer\.utils\..*Error"),
        "read the Composer error above",
        UNKNOWN,
    ),
    Signature(
        "streaming dataset error",
        _any(r"streaming\.base\..*(?:Error|Exception)"),
        "check the dataset's location and credentials",
        UNKNOWN,
    ),
    Signature(
        "training stopped logging metrics",
        _any(r"\[MLflow Logger\]\[Warning\] No new logs have been emitted"),
        "training hung: read the last lines of every node",
        UNKNOWN,
    ),
    Signature(
        "command not found",
        _any(r"command not found", flags=re.IGNORECASE),
        "check the command's spelling and that the image has the program on its PATH",
        DETERMINISTIC,
    ),
    Signature(
        "killed by a signal",
        _any(r"signal\s+(9|SIGKILL|SIGTERM)", flags=re.IGNORECASE),
        "something stopped the process: often the out-of-memory killer or a preemption",
        UNKNOWN,
    ),
)

# What the platform says of an attempt (its state message) when the hosts, not the code,
# failed: a node lost or preempted, no capacity. The cause whatever the nodes logged.
PLATFORM_SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "node lost",
        _any(r"\bnode \d+ (?:was |is )?lost\b", r"\blost (?:a |the )?node\b", flags=re.I),
        "the host stopped answering; a retry on other hosts resumes from the last checkpoint",
        INFRASTRUCTURE,
    ),
    Signature(
        "node preempted",
        _any(r"\bpreempt", r"\bspot instance", flags=re.IGNORECASE),
        "the cloud took the host back; a retry resumes from the last checkpoint",
        INFRASTRUCTURE,
    ),
    Signature(
        "no GPU capacity",
        _any(r"\b(?:insufficient|no) (?:GPU )?capacity\b", flags=re.IGNORECASE),
        "wait for capacity, or ask for another accelerator type",
        INFRASTRUCTURE,
    ),
)

_NODE_NAMED = re.compile(r"\bnode (\d+)\b", re.IGNORECASE)

# Exit codes that name a cause on their own (128 + the signal's number for a signal).
EXIT_CODES: Mapping[int, tuple[str, str, FailureClass]] = {
    126: ("command not executable (exit code 126)", "check the command file's mode", DETERMINISTIC),
    127: (
        "command not found (exit code 127)",
        "check the command's spelling and the image's PATH",
        DETERMINISTIC,
    ),
    134: ("aborted (SIGABRT, exit code 134)", "read the assertion or abort message above", UNKNOWN),
    137: (
        "killed (SIGKILL, exit code 137), most often by the out-of-memory killer",
        "use less host memory or more nodes",
        UNKNOWN,
    ),
    139: (
        "segmentation fault (SIGSEGV, exit code 139)",
        "a native library crashed: check library and driver versions of the image",
        UNKNOWN,
    ),
    143: (
        "terminated (SIGTERM, exit code 143)",
        "something stopped the process: a preemption, a timeout or a cancel",
        UNKNOWN,
    ),
}

# Jobs API termination types: a client error is the workload's own (a retry repeats it); a
# cloud failure or an internal error is the platform's (another attempt may not meet it).
_TERMINATION_CLASSES: Mapping[str, FailureClass] = {
    "CLIENT_ERROR": DETERMINISTIC,
    "CLOUD_FAILURE": INFRASTRUCTURE,
    "INTERNAL_ERROR": INFRASTRUCTURE,
}
# Termination codes that only restate the result (the command failed, a cancel, a skip):
# they explain nothing the logs do not.
_UNINFORMATIVE_CODES = frozenset(
    {
        "",
        "SUCCESS",
        "SUCCESS_WITH_FAILURES",
        "RUN_EXECUTION_ERROR",
        "USER_CANCELED",
        "CANCELED",
        "SKIPPED",
    }
)


def match_signature(line: str) -> Signature | None:
    """The first signature the line matches (logdetect.go matchFatalPattern, with a cause)."""
    for signature in SIGNATURES:
        if any(p.search(line) for p in signature.patterns):
            return signature
    return None


def exit_code_of(lines: Sequence[str]) -> int | None:
    """The exit code of the launcher's "Script failed" line, the newest when several."""
    for line in reversed(lines):
        found = _SCRIPT_FAILED.search(line)
        if found:
            return int(found.group(1))
    return None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The cause of a failed run, where it happened and what to do."""

    cause: str
    advice: str
    failure_class: FailureClass
    node: int | None = None
    task_key: str | None = None
    attempt_number: int | None = None  # 0-based, as the API and the CLI count (its "retries")
    max_retries: int | None = None
    line: str | None = None  # the log line that shows it
    # The newest checkpoint in the task's folder when the attempt ended: where a retry resumes.
    checkpoint: Checkpoint | None = None

    @property
    def deterministic(self) -> bool:
        """The same code and data fail the same way: retries will not help."""
        return self.failure_class is DETERMINISTIC

    def where(self) -> str:
        parts: list[str] = [self.failure_class.value]
        if self.task_key:
            parts.append(f"task {self.task_key}")
        if self.attempt_number is not None:
            if self.max_retries is not None and self.max_retries >= 0:
                parts.append(f"retry {self.attempt_number} of {self.max_retries}")
            else:
                parts.append(f"retry {self.attempt_number}")
        return ", ".join(parts)

    def headline(self) -> str:
        """``CUDA out of memory on node 1 (deterministic, task train, retry 3 of 3): reduce
        the batch size or use more accelerators; retries will not help``."""
        text = self.cause + (f" on node {self.node}" if self.node is not None else "")
        text += f" ({self.where()}): {self.advice}"
        if self.deterministic:
            text += "; retries will not help"
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "cause": self.cause,
            "advice": self.advice,
            "failure_class": self.failure_class.value,
            "deterministic": self.deterministic,
            "node": self.node,
            "task_key": self.task_key,
            "attempt_number": self.attempt_number,
            "line": self.line,
            "headline": self.headline(),
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class Termination:
    """The Jobs API's ``status.termination_details`` of a run or task."""

    code: str
    type: str
    message: str

    @classmethod
    def from_api(cls, body: Mapping[str, object]) -> Termination | None:
        status = body.get("status")
        details = status.get("termination_details") if isinstance(status, Mapping) else None
        if not isinstance(details, Mapping):
            return None
        code, kind, message = (
            details.get("code"),
            details.get("type"),
            details.get("message"),
        )
        return cls(
            code if isinstance(code, str) else "",
            kind if isinstance(kind, str) else "",
            message if isinstance(message, str) else "",
        )


def diagnose(
    node_lines: Mapping[int, Sequence[str]],
    *,
    task_key: str | None = None,
    attempt_number: int | None = None,
    max_retries: int | None = None,
    termination: Termination | None = None,
    failed_node: int | None = None,
    state_message: str | None = None,
) -> Diagnosis | None:
    """The cause of a failure: the platform's state message of the attempt when it says the
    hosts failed (a node lost or preempted); else from each node's last lines a fatal
    signature (the earliest-listed one found on any node; the failed node's first on a tie),
    else an exit code that names a cause, else the platform's termination reason when it says
    more than "the command failed". None when nothing says why."""

    def found(
        cause: str,
        advice: str,
        failure_class: FailureClass,
        node: int | None,
        line: str | None = None,
    ) -> Diagnosis:
        return Diagnosis(
            cause,
            advice,
            failure_class,
            node=node,
            task_key=task_key,
            attempt_number=attempt_number,
            max_retries=max_retries,
            line=line,
        )

    if state_message:
        for platform in PLATFORM_SIGNATURES:
            if any(p.search(state_message) for p in platform.patterns):
                named = _NODE_NAMED.search(state_message)
                return found(
                    platform.cause,
                    platform.advice,
                    platform.failure_class,
                    int(named.group(1)) if named else failed_node,
                    state_message.strip(),
                )
    order = sorted(node_lines, key=lambda n: (n != failed_node, n))
    best: tuple[int, int, str] | None = None  # (signature index, node, line)
    for node in order:
        for line in node_lines[node]:
            signature = match_signature(line)
            if signature is None:
                continue
            index = SIGNATURES.index(signature)
            if best is None or index < best[0]:
                best = (index, node, line.strip())
    if best is not None:
        signature = SIGNATURES[best[0]]
        return found(signature.cause, signature.advice, signature.failure_class, best[1], best[2])
    for node in order:
        code = exit_code_of(node_lines[node])
        if code is not None and code in EXIT_CODES:
            return found(*EXIT_CODES[code], node)
    if termination is not None and termination.code not in _UNINFORMATIVE_CODES:
        return found(
            f"{termination.code.replace('_', ' ').lower()} ({termination.type or 'termination'})",
            termination.message or "see the run page",
            _TERMINATION_CLASSES.get(termination.type, UNKNOWN),
            failed_node,
        )
    return None

"""``compute``: accelerators, nodes, pools and priority (docs/spec/workload.md §1)."""

from __future__ import annotations

from typing import Any

from air_runtime.workload._check_base import Section, _short
from air_runtime.workload._models import GPUS_PER_NODE, PRIORITY_CLASSES

COMPUTE_KEYS = ("accelerator_type", "num_accelerators", "pool_id", "priority_class")
# Far above any AI Runtime allocation: a guard against a typo (GPUs per node multiplied in
# twice, a missing unit) that would otherwise build a submit body listing millions of ranks.
MAX_NODES = 2048


class ComputeRules(Section):
    def compute(self, raw: Any, present: bool) -> dict[str, Any] | None:
        if not present:
            self.add(
                "compute",
                "compute is required",
                "add compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}",
            )
            return None
        data = self.mapping(raw, "compute", COMPUTE_KEYS, "compute")
        if data is None:
            return None
        out: dict[str, Any] = {}
        gpus = None
        valid = ", ".join(GPUS_PER_NODE)
        if "accelerator_type" not in data:
            self.add(
                "compute.accelerator_type",
                "compute.accelerator_type is required",
                f"one of {valid}",
            )
        else:
            acc = self.string(data["accelerator_type"], "compute.accelerator_type")
            if acc is not None:
                if acc in GPUS_PER_NODE:
                    out["accelerator_type"] = acc
                    gpus = GPUS_PER_NODE[acc]
                else:
                    import difflib  # only a refusal suggests

                    close = difflib.get_close_matches(acc, list(GPUS_PER_NODE), n=1, cutoff=0.6)
                    hint = f"valid values: {valid}" + (
                        f" (did you mean {close[0]!r}?)" if close else ""
                    )
                    self.add(
                        "compute.accelerator_type",
                        f"unknown compute.accelerator_type {_short(acc)} (names are case-sensitive)",
                        hint,
                    )
        if "num_accelerators" not in data:
            self.add(
                "compute.num_accelerators",
                "compute.num_accelerators is required",
                "give the total number of GPUs, a multiple of the GPUs per node",
            )
        else:
            count = self.integer(data["num_accelerators"], "compute.num_accelerators", 1)
            if count is not None:
                if gpus is not None and count % gpus:
                    self.add(
                        "compute.num_accelerators",
                        f"compute.num_accelerators for {out['accelerator_type']} must be a "
                        f"multiple of {gpus}, got {count}",
                        self._multiples_hint(count, gpus),
                    )
                elif gpus is not None and count // gpus > MAX_NODES:
                    self.add(
                        "compute.num_accelerators",
                        f"compute.num_accelerators {count} means {count // gpus} "
                        f"{out['accelerator_type']} nodes; at most {MAX_NODES} nodes can be "
                        "requested",
                        "num_accelerators is the total number of GPUs of the workload "
                        f"({gpus} per {out['accelerator_type']} node), not a per-node count",
                    )
                else:
                    out["num_accelerators"] = count
        pool_id = None
        if "pool_id" in data:
            pool_id = self.string(data["pool_id"], "compute.pool_id")
            if pool_id is not None:
                pool_id = pool_id.strip()  # compute.go: trimmed, then 1-255
                if len(pool_id) > 255:
                    self.add(
                        "compute.pool_id",
                        f"compute.pool_id is {len(pool_id)} characters, more than 255",
                        "copy the pool id exactly",
                    )
                else:
                    out["pool_id"] = pool_id
        if "priority_class" in data:
            prio = self.string(data["priority_class"], "compute.priority_class")
            if prio is not None:
                prio = prio.strip()  # compute.go parsePriorityClass: trimmed, upper-cased
                if prio.upper() not in PRIORITY_CLASSES:
                    self.add(
                        "compute.priority_class",
                        f"unknown compute.priority_class {_short(prio)}",
                        f"one of {', '.join(PRIORITY_CLASSES)}",
                    )
                elif "pool_id" not in data:
                    self.add(
                        "compute.priority_class",
                        "compute.priority_class requires compute.pool_id",
                        "add compute.pool_id (priority applies within provisioned capacity) "
                        "or remove priority_class",
                    )
                else:
                    out["priority_class"] = prio.upper()
        if "accelerator_type" in out and "num_accelerators" in out:
            return out
        return None

    @staticmethod
    def _multiples_hint(count: int, gpus: int) -> str:
        lower = count - count % gpus
        choices = [lower, lower + gpus] if lower else [gpus]
        return "use " + " or ".join(str(c) for c in choices) + f" ({gpus} GPUs per node)"

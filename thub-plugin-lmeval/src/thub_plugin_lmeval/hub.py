"""Offline safety: a named task's dataset is read from the local cache when the Hugging Face Hub is
unreachable, and a dataset that is not there is a clear error naming the task and its data.

``datasets`` retries an unreachable Hub for about half a minute per dataset before it gives up; one
quick probe (a HEAD request, a few seconds at most) decides instead, and offline mode is then set
for the evaluation so a cached dataset loads at once and a missing one fails at once.
"""

from __future__ import annotations

# One set of offline helpers for every Hub dataset thub reads (training data too): thub.data.hub
from thub.data.hub import PROBE_TIMEOUT, cache_home, endpoint, offline_by_choice, offline_mode, probe
from thub.errors import UsageError

__all__ = ["PROBE_TIMEOUT", "cache_home", "endpoint", "missing_dataset", "offline_by_choice", "offline_mode",
           "probe"]


def missing_dataset(task: str, dataset: str, reason: str) -> UsageError:
    """The error for a named task whose data is neither reachable nor cached."""
    state = "set offline" if reason.endswith("=1") else "unreachable"
    return UsageError(
        f"{task} reads {dataset} from the Hugging Face Hub, which is {state} ({reason}) and not in the "
        f"local cache (HF_HOME={cache_home()}); download it where the network is (same HF_HOME), "
        "or give a local task file (.jsonl prompts/answers or a harness .yaml)")

"""A tracker that fails during training is a warning, never the run's status (docs/trackers.md).

HF Trainer's reporting integrations (``report_to``: MLflow, W&B, TensorBoard, ...) run inside the
training loop: an exception from one (a store that went away, a locked SQLite file, a failed
flush of MLflow's asynchronous logging when the run ends) would stop the training and fail the
run. :func:`guard_reporting_integrations` wraps every integration's event methods, in the
training child, before the Trainer is built: the first failure is one warning line on stderr
(the run's log), and that integration is silent for the rest of the run.
"""

from __future__ import annotations

import sys
from typing import Any

_GUARDED = "_thub_guarded"


def _guarded(callback: type, name: str) -> type:
    """A subclass of the integration ``callback`` whose ``on_*`` events never raise."""
    from transformers import TrainerCallback

    def wrap(event: str, method: Any) -> Any:
        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(self, "_thub_failed", False):
                return None
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - whatever the tracker raised, training goes on
                self._thub_failed = True
                print(f"thub: warning: the {name} tracker failed in {event} ({type(exc).__name__}: {exc}); "
                      "training goes on without it", file=sys.stderr, flush=True)
                return None

        guarded.__name__ = event
        return guarded

    events = {event: wrap(event, getattr(callback, event)) for event in dir(TrainerCallback)
              if event.startswith("on_") and callable(getattr(callback, event, None))}
    return type(callback.__name__, (callback,), {**events, _GUARDED: True})


def guard_reporting_integrations() -> None:
    """Wrap every HF reporting integration (once per process; transformers reads its table of
    integrations when a Trainer is built)."""
    from transformers.integrations import integration_utils

    table = integration_utils.INTEGRATION_TO_CALLBACK
    for name, callback in list(table.items()):
        if not getattr(callback, _GUARDED, False):
            table[name] = _guarded(callback, name)

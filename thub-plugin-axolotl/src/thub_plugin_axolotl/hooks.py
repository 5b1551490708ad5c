"""thub inside axolotl: an axolotl plugin (``axolotl.integrations.base.BasePlugin``) that adds thub's
Trainer callback (metrics stream, checkpoint events, SIGTERM -> save and stop) to axolotl's trainer.

axolotl loads plugins named in the config's ``plugins:`` list by import string; the runner sets
:data:`CONTEXT` before axolotl builds the trainer. Imported only in the training child.
"""

from __future__ import annotations

from typing import Any

from axolotl.integrations.base import BasePlugin

#: The running thub RunContext (set by thub_plugin_axolotl.runner.run).
CONTEXT: Any = None


class ThubPlugin(BasePlugin):
    """Adds thub's callback after axolotl created the trainer."""

    def add_callbacks_post_trainer(self, cfg: Any, trainer: Any) -> list[Any]:
        if CONTEXT is None:
            return []
        from thub.backend import metrics_callback

        return [metrics_callback(CONTEXT)]

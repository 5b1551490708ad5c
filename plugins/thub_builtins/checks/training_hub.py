"""``core.training-hub``: Training Hub installed next to thub, and which ``thub`` script runs.

Both distributions install a console script named ``thub`` (training-hub 0.11.2:
``thub = training_hub.cli:main``); in one environment the last one installed wins, and a
``thub`` earlier on PATH wins over this environment's. thub runs Training Hub's command lines
(``thub sft ...``) and Python calls (``from thub import sft``) itself, so the fix is to uninstall
training-hub (its training libraries go into managed environments with ``thub install``).
Metadata and the script's text only; nothing is imported.
"""

from __future__ import annotations

import re
from pathlib import Path

from thub.specs import CheckContext, CheckResult
from thub_builtins.checks._util import dist_version, fail, ok, warn, which

TRAINING_HUB = "training-hub"
THUB_ENTRY = "thub.cli.main:main"
HUB_ENTRY = "training_hub.cli:main"
_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+(\w+)", re.MULTILINE)
_UNINSTALL = ("pip uninstall training-hub: thub runs its command lines (thub sft ...) and its Python calls "
              "(from thub import sft) itself; put the training libraries it brought into managed environments "
              "with `thub install BACKEND --into managed`")


def script_entry(path: str) -> str | None:
    """The ``module:function`` a pip-generated console script runs (its ``from M import F`` line),
    or None for another kind of file."""
    try:
        text = Path(path).read_text(errors="replace")[:4096]
    except OSError:
        return None
    found = _IMPORT.search(text)
    return f"{found.group(1)}:{found.group(2)}" if found else None


def environment_entries() -> list[str]:
    """``distribution: module:function`` of every ``thub`` console script this environment declares."""
    from thub.installed import distributions

    # thub.installed's one parse per distribution (importlib.metadata.entry_points() parses every
    # METADATA again for the names); entry_points.txt is read on its own
    return sorted(f"{dist.name}: {point.value}" for dist in distributions()
                  for point in dist.distribution.entry_points
                  if point.group == "console_scripts" and point.name == "thub")


def check_training_hub(context: CheckContext) -> CheckResult:
    version = dist_version(TRAINING_HUB)
    script = which(context, "thub")
    entry = script_entry(script) if script else None
    details = [f"`thub` on PATH: {script or 'none'}" + (f" (runs {entry})" if entry else ""),
               *(f"declared here by {line}" for line in environment_entries())]
    if entry == HUB_ENTRY:
        where = f"training-hub {version} is installed here" if version else "Training Hub's `thub` comes first on PATH"
        then = ("; then reinstall thub as you installed it (pip install --force-reinstall --no-deps ...) to restore "
                "its script, or run python -m thub" if version else
                f"; or remove {Path(script or '').parent} from PATH (python -m thub always runs this thub)")
        return fail(f"{where}: `thub` on PATH ({script}) is Training Hub's, not this thub", _UNINSTALL + then,
                    details, anchor="coretraining-hub")
    if version:
        return warn(f"training-hub {version} is installed here too: both install a `thub` script, the one "
                    "installed last wins", _UNINSTALL, details, anchor="coretraining-hub")
    return ok("training-hub is not installed here" + (f"; `thub` on PATH runs {entry}" if entry else ""), details)

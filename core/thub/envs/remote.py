"""The parent side of :mod:`thub.envs.describe`: ask a managed environment's interpreter."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from thub.errors import ThubError, UsageError


def call_env(python: str, command: str, payload: dict[str, Any] | None = None, timeout: float = 120) -> Any:
    """Run ``python -m thub.envs.describe COMMAND`` and return its JSON answer; the
    environment's refusal of bad input is raised as :class:`~thub.errors.UsageError`.

    The child reads no managed environments itself (``THUB_ENVS=""``): it answers only for what
    is installed in it. ``THUB_PLUGINS``/``THUB_DISABLE_PLUGINS`` choose plugins of the *current*
    environment, so they are not passed on.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("THUB_PLUGINS", "THUB_DISABLE_PLUGINS")}
    env["THUB_ENVS"] = ""
    try:
        done = subprocess.run([python, "-m", "thub.envs.describe", command],
                              input=json.dumps(payload or {}, default=str),
                              capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise ThubError(f"the managed environment's interpreter {python} does not exist; "
                        "reinstall it (`thub install BACKEND --into managed --force`)") from None
    except subprocess.TimeoutExpired:
        raise ThubError(f"{python} -m thub.envs.describe {command} did not answer within {timeout:g} s") from None
    if done.returncode == 2:  # the environment refused the input (describe.main): exit 2 here too
        try:
            refused = json.loads(done.stdout.strip().splitlines()[-1])["usage_error"]
        except (IndexError, ValueError, KeyError, TypeError):
            pass
        else:
            raise UsageError(refused)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise ThubError(f"{python} -m thub.envs.describe {command} failed: {lines[-1] if lines else done.returncode}")
    return json.loads(done.stdout)


def translate_in_env(python: str, algorithm: str, backend: str, params: dict[str, Any]) -> Any:
    """The backend-native configuration computed by the environment that holds ``backend``."""
    return call_env(python, "translate", {"algorithm": algorithm, "backend": backend, "params": params})

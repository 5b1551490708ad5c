"""Weights & Biases, a tracker registered by ``thub_builtins.trackers``: its writer for the
``thub`` route (a run started in the parent), its plan line and checks (an API key when online),
what it adds to a run a library opens itself, and the key a library that reads no ``~/.netrc``
needs (moved here from ``thub.trackers``). Imported only when a run turns W&B on (``wandb_project``).
"""

from __future__ import annotations

import netrc
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.specs import TrackerProblem
from thub.trackers import run_name
from thub.trackers.sink import hf_tag

if TYPE_CHECKING:
    from thub.runner.context import RunContext

_OFF = {"offline", "disabled", "dryrun"}


def wandb_dir(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """Where W&B keeps its local files: ``WANDB_DIR`` if set, else the run directory."""
    environ = os.environ if environ is None else environ
    return environ.get("WANDB_DIR") or str(params["ckpt_output_dir"])


class WandbWriter:
    """A W&B run started in the parent (``WANDB_MODE=offline`` works without an account)."""

    def __init__(self, params: Mapping[str, Any], metadata: Mapping[str, Any], run_id: str | None = None) -> None:
        import wandb

        directory = wandb_dir(params)
        Path(directory).mkdir(parents=True, exist_ok=True)
        # console off: the parent's output is thub's progress, not training; stats off: the
        # parent's CPU and memory say nothing about the training processes
        settings = wandb.Settings(console="off", x_disable_stats=True, silent=True)
        self.run = wandb.init(project=params["wandb_project"], entity=params.get("wandb_entity"),
                              name=run_name(params, "wandb"), dir=directory, config={"thub": dict(metadata)},
                              id=run_id, resume="allow" if run_id else None, reinit="create_new",
                              settings=settings)
        # wandb.init leaves its service's address in os.environ: a training child started later
        # by this process (another run, a library that logs W&B itself) would write through it
        os.environ.pop("WANDB_SERVICE", None)
        self.run.define_metric("train/global_step")
        self.run.define_metric("*", step_metric="train/global_step", step_sync=True)

    def log(self, step: int, metrics: Mapping[str, float], wall_time: float | None = None) -> None:
        self.run.log({**{hf_tag(k): v for k, v in metrics.items()}, "train/global_step": step}, step=step)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "succeeded" else 1)

    def info(self) -> dict[str, Any]:
        return {"run_id": self.run.id, "path": str(Path(self.run.dir).parent), "project": self.run.project,
                "mode": "offline" if self.run.offline else "online"}


def open_writer(params: Mapping[str, Any], metadata: Mapping[str, Any],
                previous: Mapping[str, Any] | None = None) -> WandbWriter:
    """The ``thub``-route writer; ``previous`` (its ``trackers.json`` entry) resumes its run."""
    return WandbWriter(params, metadata, (previous or {}).get("run_id"))


def where(params: Mapping[str, Any]) -> str:
    mode = os.environ.get("WANDB_MODE", "online")
    return f"project {params['wandb_project']} (run {run_name(params, 'wandb')}, {mode})"


def record(params: Mapping[str, Any]) -> dict[str, Any]:
    return {"project": params["wandb_project"], "run_name": run_name(params, "wandb")}


def _wandb_key(environ: Mapping[str, str]) -> bool:
    if environ.get("WANDB_API_KEY"):
        return True
    host = urllib.parse.urlparse(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or ""
    path = environ.get("NETRC") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def problems(params: Mapping[str, Any], python: str | None, environ: Mapping[str, str]) -> list[TrackerProblem]:
    if environ.get("WANDB_MODE", "").lower() in _OFF or _wandb_key(environ):
        return []
    return [TrackerProblem("wandb", "W&B would log online, but no API key is set (WANDB_API_KEY or ~/.netrc)",
                           "wandb login   # or: export WANDB_API_KEY=...\n"
                           "# or log locally without an account: export WANDB_MODE=offline")]


def annotate(metadata: dict[str, Any]) -> dict[str, Any] | None:
    import wandb

    run = wandb.run
    if run is None:
        return None
    run.config.update({"thub": metadata}, allow_val_change=True)
    return {"run_id": run.id, "path": str(Path(run.dir).parent), "project": run.project,
            "mode": "offline" if run.offline else "online"}


def prepare(context: RunContext, metadata: dict[str, Any], _: str | None) -> tuple[dict[str, str], dict]:
    import yaml

    # wandb.init loads the YAML file named by WANDB_SWEEP_PARAM_PATH (wandb's config-file format,
    # key: {value: ...}) into run.config, in whatever process the library opens its run; the keys
    # are locked against changes by the library, which suits parameters thub set. (WANDB_CONFIG_PATHS
    # would be the plain way, but wandb 0.31's settings reject its value: a str, not a list.)
    content: dict[str, Any] = {"thub": {"value": metadata}}
    agent = os.environ.get("WANDB_SWEEP_PARAM_PATH")
    if agent and Path(agent).is_file():  # a W&B sweep agent started this run: keep its parameters
        content = {**(yaml.safe_load(Path(agent).read_text()) or {}), **content}
    path = context.run_dir.path / "logs" / "wandb_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return {"WANDB_SWEEP_PARAM_PATH": str(path)}, {}


def wandb_key_environment(params: Mapping[str, Any], library: str,
                          environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """For a library that logs to W&B only when ``WANDB_API_KEY`` is set and never reads
    ``~/.netrc`` (mini-trainer refuses to start without it, ART leaves W&B out silently), offline
    too. Offline (``WANDB_MODE`` offline/disabled/dryrun) an empty key lets it log locally (W&B
    needs none); online without the variable is a usage error naming the fix, before the run."""
    environ = os.environ if environ is None else environ
    if not params.get("wandb_project") or environ.get("WANDB_API_KEY") is not None:
        return {}
    if environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return {"WANDB_API_KEY": ""}
    from thub.errors import UsageError

    raise UsageError(f"{library} logs to W&B only with WANDB_API_KEY set (it does not read ~/.netrc): "
                     "export WANDB_API_KEY=...; or log locally without an account: export WANDB_MODE=offline")


def trainer_environment(params: Mapping[str, Any]) -> dict[str, str]:
    env = {"WANDB_PROJECT": params["wandb_project"], "WANDB_DIR": wandb_dir(params)}
    if params.get("wandb_entity"):
        env["WANDB_ENTITY"] = params["wandb_entity"]
    return env

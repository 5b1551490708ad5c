"""One plan for every dry run and the real run (design.md, "A run", step 0).

``thub train ... --dry-run`` (on every launcher), :func:`thub.dry_run`, ``thub train`` /
:func:`thub.train` (:func:`thub.runner.run_training`) and every launcher's submission
(``LauncherSpec.submit``) all get their plan from :func:`plan_for`, so what a dry run shows and
refuses is what the run does and refuses:

1. the resolved parameters (:func:`thub.config.resolve.resolve`: every layer with its source,
   validation, the honoured check), made absolute where the job runs elsewhere
   (``LauncherSpec.runs_elsewhere``);
2. the data gate (:func:`thub.data.training.validate_training_data`): every source exists and
   passes ``thub data check``, in rows of a kind the algorithm trains on, which the backend's
   library can hold (``BackendSpec.check_rows``: e.g. no tool turns in LLaMA-Factory's dpo rows);
3. the backend-native translation (the backend's ``translate``: a batch size that does not split
   over the processes is refused here, exit 2, not in the child after the run directory exists);
4. the route of each tracker, the torchrun settings of a distributed run, and the launcher's
   part (``LauncherSpec.plan``: e.g. a cluster, a batch script and the commands that submit it).

Any refusal is a :class:`~thub.errors.UsageError` (exit 2) before anything is written. Checks that
need the machine the run starts on (preflight doctor checks, the model path, tracker packages and
stores) stay with the real run, after the plan (docs/cli.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thub.config.resolve import ResolvedConfig
    from thub.data.training import TrainingData
    from thub.launch.options import LaunchOptions
    from thub.specs import LauncherSpec


@dataclass
class Plan:
    """What a run will do, built once (:func:`plan_for`) and shown (:meth:`as_dict`) or run.

    Attributes:
        resolved: the parameters with their sources.
        data: the rows the data gate validated (the run keeps these for the child).
        translation: the backend-native configuration of ``resolved`` (redacted in :meth:`as_dict`).
        launch: the launcher options (``None``: the local launcher of the Python API).
        request: for a launcher with a ``plan`` (``LauncherSpec.plan``), its request object
            (e.g. a :class:`~thub.launch.slurm.SlurmRequest`); None otherwise.
        launch_section: the ``launch`` entry of the plan and of ``thub_run.json`` the launcher's
            plan gave (e.g. cluster, nodes, script path, submit commands, warnings).
        script: the script or command the launcher's plan renders, shown verbatim.
    """

    resolved: ResolvedConfig
    data: TrainingData
    translation: Any
    launch: LaunchOptions | None = None
    request: Any = None
    launch_section: dict[str, Any] = field(default_factory=dict)
    script: str = ""
    export: dict[str, Any] | None = None  # the post-run export step (thub.checkpoint.export.plan_export)
    post_run: dict[str, Any] | None = None  # the eval and push steps after it (thub.runner.poststeps.plan_steps)

    @property
    def local(self) -> bool:
        """The run starts on this machine (its ``PET_*`` describe the run's worker)."""
        return self.launch is None or not self.launch.spec().runs_elsewhere

    def as_dict(self) -> dict[str, Any]:
        """The plan as ``thub train ... --dry-run --json`` prints it and :func:`thub.dry_run`
        returns it: every value with its source, the translation, the trackers' routes, the
        torchrun settings of a distributed run and the launcher's ``launch`` section."""
        from thub.launch.torchrun import is_distributed, torchrun_sources
        from thub.redact import redact, redact_entries
        from thub.trackers import plan as tracker_plan

        resolved = self.resolved
        values = resolved.values()
        # secrets (URI passwords, ?token= values, *_token parameters) never reach the screen
        data: dict[str, Any] = {
            "schema_version": 1,
            "algorithm": resolved.algorithm.name,
            "backend": resolved.backend.name,
            "backend_reason": resolved.backend_reason,
            "parameters": redact_entries({k: {"value": v, "source": resolved.sources[k]} for k, v in values.items()}),
            "ignored": redact(resolved.ignored),
            "training_hub_notes": resolved.notes,
            "translation": redact(self.translation),
            "data": {"rows": len(self.data.rows), "kind": self.data.kind},
        }
        if values.get("checkpoint_storage"):  # the run's own remote prefix (URI/<run-id>, thub.runner.mirror)
            from pathlib import Path

            from thub.runner.mirror import planned_prefix

            data["checkpoint_storage"] = planned_prefix(values["checkpoint_storage"], Path(values["ckpt_output_dir"]))
        trackers = tracker_plan(values, resolved.backend, resolved.algorithm.name)
        if trackers:  # which process logs each tracker, and where its run goes
            data["trackers"] = trackers
        # PET_* describe this machine's worker: they count for the local launcher only (as in resolve)
        environ = os.environ if self.local else {}
        if is_distributed(values, environ):
            data["torchrun"] = torchrun_sources(values, resolved.sources, environ)
        if self.request is not None:
            data["launch"] = {**self.launch_section, "script": self.script}
        if self.export is not None:
            data["export"] = self.export
        if self.post_run is not None:
            data["post_run"] = self.post_run
        return data


def plan_for(resolved: ResolvedConfig, launch: LaunchOptions | None = None) -> Plan:
    """The plan of a resolved run on ``launch``'s launcher (``None``: local): the data gate and
    the translation run here; bad input raises :class:`~thub.errors.UsageError`, nothing written."""
    from thub.data.training import validate_training_data
    from thub.manager import get_registry

    spec: LauncherSpec | None = launch.spec() if launch is not None else None
    if spec is not None and spec.runs_elsewhere:
        absolute_paths(resolved)  # the job runs elsewhere: before anything reads the run directory
    data = validate_training_data(resolved.values(), resolved.algorithm)
    # rows the backend's library cannot hold (BackendSpec.check_rows): refused here, not in the child
    get_registry().check_rows(resolved.algorithm.name, resolved.backend.name, data.rows, data.locations,
                              resolved.values())
    translation = get_registry().translate(resolved.algorithm.name, resolved.backend.name, resolved.values())
    from thub.checkpoint.export import plan_export

    # an export folder that is not empty: refused before training, not after it
    from thub.runner.poststeps import plan_steps

    chained = spec is not None and spec.chained_steps  # the post-run steps are jobs chained after training
    plan = Plan(resolved, data, translation, launch, export=plan_export(resolved.values(), chained),
                post_run=plan_steps(resolved.values(), chained))  # bad eval/push input: before training
    if spec is not None and spec.plan is not None and launch is not None:
        from thub.specs import load_object

        plan.request, plan.launch_section, plan.script = load_object(spec.plan)(resolved, launch)
    return plan


def absolute_paths(resolved: Any) -> None:
    """The job runs elsewhere: make the run directory absolute (other paths resolve from WORKDIR)."""
    values = resolved.values()
    absolute = os.path.abspath(values["ckpt_output_dir"])
    if absolute != values["ckpt_output_dir"]:
        resolved.params = resolved.params.model_copy(update={"ckpt_output_dir": absolute})

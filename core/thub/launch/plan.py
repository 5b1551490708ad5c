"""One plan for every dry run and the real run (design.md, "A run", step 0).

``thub train ... --dry-run`` (the local launcher and ``--launcher slurm``), :func:`thub.dry_run`,
``thub train`` / :func:`thub.train` (:func:`thub.runner.run_training`) and a SLURM submission
(:func:`thub.launch.submit.launch_slurm`) all get their plan from :func:`plan_for`, so what a dry
run shows and refuses is what the run does and refuses:

1. the resolved parameters (:func:`thub.config.resolve.resolve`: every layer with its source,
   validation, the honoured check), made absolute where the job runs elsewhere (SLURM);
2. the data gate (:func:`thub.data.training.validate_training_data`): every source exists and
   passes ``thub data check``, in rows of a kind the algorithm trains on, which the backend's
   library can hold (``BackendSpec.check_rows``: e.g. no tool turns in LLaMA-Factory's dpo rows);
3. the backend-native translation (the backend's ``translate``: a batch size that does not split
   over the processes is refused here, exit 2, not in the child after the run directory exists);
4. the route of each tracker, the torchrun settings of a distributed run, and the launcher's
   part (SLURM: the cluster, the batch script and its ``sbatch`` commands).

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


@dataclass
class Plan:
    """What a run will do, built once (:func:`plan_for`) and shown (:meth:`as_dict`) or run.

    Attributes:
        resolved: the parameters with their sources.
        data: the rows the data gate validated (the run keeps these for the child).
        translation: the backend-native configuration of ``resolved`` (redacted in :meth:`as_dict`).
        launch: the launcher options (``None``: the local launcher of the Python API).
        slurm: for ``--launcher slurm``, the :class:`~thub.launch.slurm.SlurmRequest`.
        launch_section: for ``--launcher slurm``, the ``launch`` entry of the plan and of
            ``thub_run.json`` (cluster, nodes, script path, sbatch commands, warnings).
        script: for ``--launcher slurm``, the batch script.
    """

    resolved: ResolvedConfig
    data: TrainingData
    translation: Any
    launch: LaunchOptions | None = None
    slurm: Any = None
    launch_section: dict[str, Any] = field(default_factory=dict)
    script: str = ""
    export: dict[str, Any] | None = None  # the post-run export step (thub.checkpoint.export.plan_export)
    post_run: dict[str, Any] | None = None  # the eval and push steps after it (thub.runner.poststeps.plan_steps)

    @property
    def local(self) -> bool:
        return self.launch is None or self.launch.launcher == "local"

    def as_dict(self) -> dict[str, Any]:
        """The plan as ``thub train ... --dry-run --json`` prints it and :func:`thub.dry_run`
        returns it: every value with its source, the translation, the trackers' routes, the
        torchrun settings of a distributed run and, for SLURM, the ``launch`` section."""
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
        if self.slurm is not None:
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

    slurm = launch if launch is not None and launch.launcher == "slurm" else None
    if slurm is not None:
        from thub.launch.submit import absolute_paths

        absolute_paths(resolved)  # the job runs elsewhere: before anything reads the run directory
    data = validate_training_data(resolved.values(), resolved.algorithm)
    # rows the backend's library cannot hold (BackendSpec.check_rows): refused here, not in the child
    get_registry().check_rows(resolved.algorithm.name, resolved.backend.name, data.rows, data.locations,
                              resolved.values())
    translation = get_registry().translate(resolved.algorithm.name, resolved.backend.name, resolved.values())
    from thub.checkpoint.export import plan_export

    # an export folder that is not empty: refused before training, not after it
    from thub.runner.poststeps import plan_steps

    plan = Plan(resolved, data, translation, launch, export=plan_export(resolved.values(), slurm is not None),
                post_run=plan_steps(resolved.values(), slurm is not None))  # bad eval/push input: before training
    if slurm is not None:
        from thub.launch.slurm import render_script
        from thub.launch.submit import slurm_launch

        plan.slurm, plan.launch_section = slurm_launch(resolved, slurm)
        plan.script = render_script(plan.slurm)
    return plan

"""Launchers: how a resolved run is started on one machine, several nodes or a scheduler.

* :mod:`thub.launch.options`: the launcher options of ``thub train`` (``--launcher``,
  ``--cluster``, ``--nodes``, ...) and the parameters they set (a layer of ``resolve()``);
* :mod:`thub.launch.torchrun`: torchrun arguments from the distributed parameters and the
  ``PET_*`` environment (Kubeflow Trainer, plain multi-node);
* :mod:`thub.launch.profiles`: cluster profiles (``thub clusters``);
* :mod:`thub.launch.slurm`, :mod:`thub.launch.submit`: the SLURM batch script, its submission
  (``--launcher slurm``) and the scheduler's view of a run (status, cancel);
* :mod:`thub.launch.worker`: the job side of a scheduler launch (``prepare``, ``node``).

* :mod:`thub.launch.choice`: ``--launcher``, a choice of the registered launchers.

Launchers are registered by plugins (``thub_register_launchers``, :class:`thub.specs.LauncherSpec`);
``local`` and ``slurm`` by ``thub_builtins.launchers``, whose SLURM parts name the modules above.
A local run is started by :func:`thub.runner.run_training`. Nothing here imports :mod:`thub.cli`
(tests/test_architecture.py): what a launcher prints goes through :mod:`thub.ui`.
"""

#: Job states (``LauncherSpec.status``, SLURM's names) after which a job will not run again
JOB_ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                       "BOOT_FAIL", "DEADLINE"})

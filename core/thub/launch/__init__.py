"""Launchers: how a resolved run is started on one machine, several nodes or a scheduler.

* :mod:`thub.launch.options`: the launcher options of ``thub train`` (``--launcher``,
  ``--cluster``, ``--nodes``, ...) and the parameters they set (a layer of ``resolve()``);
* :mod:`thub.launch.torchrun`: torchrun arguments from the distributed parameters and the
  ``PET_*`` environment (Kubeflow Trainer, plain multi-node);
* :mod:`thub.launch.profiles`: cluster profiles (``thub clusters``);
* :mod:`thub.launch.slurm`, :mod:`thub.launch.submit`: the SLURM batch script, its submission
  (``--launcher slurm``) and the scheduler's view of a run (status, cancel);
* :mod:`thub.launch.worker`: the job side of a scheduler launch (``prepare``, ``node``).

A local run is started by :func:`thub.runner.run_training`. Nothing here imports :mod:`thub.cli`
(tests/test_architecture.py): what a launcher prints goes through :mod:`thub.ui`.
"""

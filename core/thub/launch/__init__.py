"""Launchers: torchrun parameters (and, later, SLURM and Kubeflow)."""

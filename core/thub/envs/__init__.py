"""Managed environments: one virtual environment per backend, found without importing it.

``thub install BACKEND`` puts a plugin and its training library either into the environment
thub runs in or into a *managed* environment of its own under thub's data directory
(:mod:`thub.envs.paths`). Each managed environment carries a manifest (:mod:`thub.envs.manifest`)
written at install time, so the core lists and runs its backends by reading one small JSON file:
a run uses that environment's interpreter for the training child.

Modules:

* :mod:`thub.envs.paths`: where environments live (XDG data directory, ``THUB_DATA_DIR``).
* :mod:`thub.envs.manifest`: the manifest format, loading, and the backend specs it yields.
* :mod:`thub.envs.catalog`: which distribution provides a backend name, and from where.
* :mod:`thub.envs.planner`: the exact commands an install runs, and the current-environment
  conflict check (a resolver dry run compared with the installed plugins' pins).
* :mod:`thub.envs.installer`: runs a plan (pip, or uv where available), exports the lock and
  writes the manifest.
* :mod:`thub.envs.describe`: runs *inside* a managed environment: describes its backends and
  translates parameters for a dry run.

Nothing here imports a training library, pip or uv into the thub process.
"""

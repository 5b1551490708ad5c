"""Import boundaries of the core, read from the source (ast), not from what a run happens to import.

* The runner, doctor and launchers print through :mod:`thub.ui`, never through :mod:`thub.cli`
  (issue 16 item 2: ``launch/submit.py`` imported ``thub.cli.output`` and ``thub.cli.plan``).
* The core never imports a plugin, the built-in one included: third-party algorithms subclass
  :class:`thub.params.BaseParams` without importing ``thub_builtins`` (issue 16 item 4).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "core" / "thub"


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``, at any depth (function-level too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from thub import cli` imports thub.cli too
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
            found.append((node.lineno, node.module))
    return found


def offending(root: Path, forbidden: str) -> list[str]:
    """``file:line: module`` for every import of ``forbidden`` (or a submodule) under ``root``."""
    return [f"{path.relative_to(CORE.parent)}:{line}: {module}"
            for path in sorted(root.rglob("*.py"))
            for line, module in imports_of(path)
            if module == forbidden or module.startswith(forbidden + ".")]


@pytest.mark.parametrize("package", ["runner", "doctor", "launch"])
def test_runner_doctor_and_launch_never_import_the_cli(package: str) -> None:
    assert offending(CORE / package, "thub.cli") == []


def test_the_core_never_imports_the_builtin_plugin() -> None:
    assert offending(CORE, "thub_builtins") == []


def test_the_walk_finds_function_level_imports(tmp_path: Path) -> None:
    # the check itself must be able to fail: the imports it has to catch are often inside functions
    (tmp_path / "m.py").write_text("def f():\n    from thub.cli.output import console\n"
                                   "def g():\n    from thub import cli\n")
    found = [module for _, module in imports_of(tmp_path / "m.py")]
    assert "thub.cli.output" in found and "thub.cli" in found


def test_a_third_party_algorithm_needs_no_builtin_plugin() -> None:
    # what docs/hooks.md shows for thub_register_algorithms, in a fresh interpreter
    probe = (
        "import sys\n"
        "from thub.params import BaseParams, param\n"
        "from thub.config.fields import param_infos\n"
        "class DPOParams(BaseParams):\n"
        "    beta: float = param(0.1, group='dpo', help='Strength of the KL penalty.', gt=0)\n"
        "infos = param_infos(DPOParams)\n"
        "assert infos['beta'].group == 'dpo' and infos['divergence_steps'].default == 3, infos\n"
        "DPOParams(model_path='m', data_path='d.jsonl', ckpt_output_dir='o')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'thub_builtins'))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def private_imports(root: Path) -> list[str]:
    """``file:line: module.name`` for every ``from thub... import _name`` under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("thub"):
                found.extend(f"{path.relative_to(CORE.parent)}:{node.lineno}: {node.module}.{alias.name}"
                             for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__"))
    return found


def test_modules_share_public_names_only() -> None:
    # issue 16: `thub config schema` and `thub estimate` imported _honoured_somewhere, _flag_values and
    # _option_for from the train command (now thub.cli.param_options); the SLURM submission imported
    # the supervisor's _validate_data; the data preview tokenize._backend/_labels, the template check
    # templates._compile, the contract kit launch.torchrun._FLAGS
    assert private_imports(CORE) == []


def test_the_package_all_lists_every_lazy_name() -> None:
    # issue 16: `thub.dry_run` worked but was missing from thub.__all__ (`from thub import *`, docs tools)
    import thub

    lazy = {"hookimpl", *thub._API, *thub._TRAINING_HUB}
    assert set(thub.__all__) == lazy | {"__version__"}
    for name in thub.__all__:
        assert getattr(thub, name) is not None, name


# --- core names no data kind or format (issue 26 item 1) -------------------------------------
# Every data kind and format, thub's own included, is registered by a plugin
# (thub_register_data_kinds, thub_builtins.data_kinds); the core dispatches through the
# DataKindSpec. Scanned: what reads, checks, tokenizes and previews data, and the parameter and
# model checks that take a format.
DATA_CORE = ("data", "cli/data.py", "config/model_path.py", "params.py", "manager.py", "specs.py", "hookspecs.py")
#: Canonical row fields that are spelled like a kind or format: the data SDK (tokenize_chat,
#: pretraining_blocks, check_messages' settings) reads rows by these fields, whatever kind holds
#: them. Allowed only where a field is read or written (row["messages"], row.get("document"),
#: "messages" in row, {"messages": ...}), never where a kind is decided (kind == "chat").
ROW_FIELDS = frozenset({"messages", "document"})


def data_names_in(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, name) of every string constant in ``source`` equal to one of ``names``, except a
    :data:`ROW_FIELDS` name read or written as a field."""
    tree = ast.parse(source)
    fields: set[int] = set()  # ids of constants in field positions
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            fields.add(id(node.slice))
        elif isinstance(node, ast.Compare) and all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            fields.add(id(node.left))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop") \
                and node.args:
            fields.add(id(node.args[0]))
        elif isinstance(node, ast.Dict):
            fields.update(id(key) for key in node.keys if key is not None)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                  and not (node.value in ROW_FIELDS and id(node) in fields))


def _registered_data_names() -> frozenset[str]:
    from thub.manager import load_registry

    registry = load_registry(entry_points=False)  # the built-in plugins: thub's own kinds
    names = {*registry.data_kinds, *(fmt.name for fmt, _kind in registry.data_formats())}
    assert {"chat", "document", "grpo", "processed", "messages", "sharegpt", "alpaca"} <= names
    return frozenset(names)


def test_the_core_names_no_data_kind_or_format() -> None:
    names = _registered_data_names()
    found = [f"{path.relative_to(CORE.parent)}:{line}: {name!r}"
             for part in DATA_CORE
             for path in (sorted((CORE / part).rglob("*.py")) if (CORE / part).is_dir() else [CORE / part])
             for line, name in data_names_in(path.read_text(encoding="utf-8"), names)]
    assert not found, "the core names data kinds/formats (register them in a plugin instead):\n" + "\n".join(found)


def test_the_data_name_scan_finds_kind_decisions() -> None:
    names = frozenset({"chat", "messages", "grpo"})
    source = ("def f(kind, row, fmt):\n"
              "    if kind == 'chat':\n"  # a decision on a kind
              "        return row['messages']\n"  # a field: allowed
              "    if fmt in ('messages', 'x'):\n"  # a format list
              "        return row.get('messages') or {'messages': []}\n"  # fields: allowed
              "    return FORMATS['grpo']\n")  # a registry keyed by a kind name
    assert data_names_in(source, names) == [(2, "chat"), (4, "messages"), (6, "grpo")]


# --- core names no experiment tracker (issue 36 items 1, 2) ----------------------------------
# TensorBoard, MLflow and W&B are TrackerSpecs registered by thub_builtins.trackers
# (thub_register_trackers); the tracker mechanism chooses trackers from the registry and calls
# their import strings. Scanned: the mechanism and every place that chose a tracker by name. A
# string in code (not a docstring) that holds a registered tracker's name (any case, as in
# WANDB_PROJECT) or is one of its parameters, or an import of a tracker's package, is a finding.
TRACKER_CORE = ("trackers", "runner/hf_trainer.py", "runner/supervisor.py", "config/resolve.py",
                "cli/param_options.py", "launch/plan.py", "manager.py", "specs.py", "hookspecs.py")


def tracker_names_in(source: str, names: frozenset[str], params: frozenset[str]) -> list[tuple[int, str]]:
    """(line, text) of every string constant in code (docstrings left out) naming a tracker or one of
    its parameters, and of every import of a tracker's package."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value in params or any(name in node.value.lower() for name in names):
                found.append((node.lineno, node.value))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [(node.lineno, m) for m in modules if m.split(".")[0] in names]
    return sorted(found)


def test_the_core_names_no_tracker() -> None:
    from thub.manager import load_registry

    registry = load_registry(entry_points=False)  # the built-in plugins: thub's own trackers
    assert set(registry.trackers) == {"tensorboard", "mlflow", "wandb"}
    names = frozenset(registry.trackers)
    params = frozenset(p for spec in registry.trackers.values() for p in spec.params)
    found = [f"{path.relative_to(CORE.parent)}:{line}: {text!r}"
             for part in TRACKER_CORE
             for path in (sorted((CORE / part).rglob("*.py")) if (CORE / part).is_dir() else [CORE / part])
             for line, text in tracker_names_in(path.read_text(encoding="utf-8"), names, params)]
    assert not found, "the core names trackers (register them in a plugin instead):\n" + "\n".join(found)


def test_the_tracker_name_scan_finds_tracker_decisions() -> None:
    source = ('"""Docstrings may name wandb."""\n'
              "def f(name, params):\n"
              "    if name == 'wandb':\n"  # a decision on a tracker
              "        return params.get('mlflow_tracking_uri')\n"  # one of its parameters
              "    env = {'TENSORBOARD_LOGGING_DIR': 1}\n"  # its variable
              "    import mlflow\n")  # its package
    assert tracker_names_in(source, frozenset({"wandb", "mlflow", "tensorboard"}),
                            frozenset({"mlflow_tracking_uri"})) == [
        (3, "wandb"), (4, "mlflow_tracking_uri"), (5, "TENSORBOARD_LOGGING_DIR"), (6, "mlflow")]


# --- core names no storage scheme (issue 36 items 1, 2) -------------------------------------
# Every push target and checkpoint_storage scheme, thub's own included, is a StorageSpec a plugin
# registers (thub_register_storage, thub_builtins.storage); the core reads a URI through the one
# parser (thub.checkpoint.storage.parse_uri) and decides by the spec's fields (supports, local,
# visibility, packages, push), never by the scheme's name. Scanned: all of core/thub, for the three
# shapes a closed set takes: a scheme compared with a name (scheme == "hf", target.scheme in (...)),
# a URI tested by its prefix (uri.startswith("file://")), and a table of two or more scheme names
# (SCHEMES = ("hf", ...), {"s3": "s3fs", "gs": ...}). Help texts and docstrings may name them.
#: (file, name): comparisons of a scheme that is no storage scheme
STORAGE_ALLOWED = {
    ("thub/envs/catalog.py", "file"),  # pip's direct_url.json: an editable install's url
    ("thub/trackers/check.py", "file"),  # an MLflow tracking store URI (file:, sqlite:), not a push target
}


def _is_scheme(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "scheme" in name.lower()


def storage_names_in(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, name) of every decision on a storage scheme's name in ``source`` (see above)."""
    found: list[tuple[int, str]] = []

    def constants(node: ast.AST) -> list[ast.Constant]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [c for c in items if isinstance(c, ast.Constant) and isinstance(c.value, str)]

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_scheme(o) for o in operands):
                found += [(c.lineno, c.value) for o in operands for c in constants(o) if c.value in names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "startswith", "removeprefix") and node.args:
            found += [(c.lineno, str(c.value).partition("://")[0]) for c in constants(node.args[0])
                      if str(c.value).partition("://")[0] in names and "://" in str(c.value)]
        elif isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)):
            keys = node.keys if isinstance(node, ast.Dict) else node.elts
            named = [k for k in keys if isinstance(k, ast.Constant) and k.value in names]
            if len(named) >= 2:
                found += [(k.lineno, str(k.value)) for k in named]
    return sorted(set(found))


def test_the_core_names_no_storage_scheme() -> None:
    from thub.manager import load_registry

    names = frozenset(load_registry(entry_points=False).storage)
    assert {"hf", "mlflow", "s3", "gs", "file"} <= names
    found = [f"{path.relative_to(CORE.parent)}:{line}: {name!r}"
             for path in sorted(CORE.rglob("*.py"))
             for line, name in storage_names_in(path.read_text(encoding="utf-8"), names)
             if (path.relative_to(CORE.parent).as_posix(), name) not in STORAGE_ALLOWED]
    assert not found, "the core names storage schemes (register them in a plugin instead):\n" + "\n".join(found)


def test_the_storage_scan_finds_scheme_decisions() -> None:
    names = frozenset({"hf", "s3", "gs", "file"})
    source = ("SCHEMES = ('hf', 's3')\n"  # a closed list
              "def f(target, uri, kind):\n"
              "    if target.scheme == 'hf':\n"  # a decision on a scheme
              "        return {'s3': 's3fs', 'gs': 'gcsfs'}\n"  # a driver table
              "    if uri.startswith('file://'):\n"  # a prefix test
              "        return kind == 'file'\n"  # no scheme: allowed
              "    return {'file': uri}\n")  # a field: allowed
    assert storage_names_in(source, names) == [(1, "hf"), (1, "s3"), (3, "hf"), (4, "gs"), (4, "s3"), (5, "file")]


# --- core names no launcher (issue 36 items 1-2) ---------------------------------------------
# Launchers are registered by plugins (thub_register_launchers; local and slurm by
# thub_builtins.launchers); thub train, thub runs, thub checkpoint push and the plan dispatch
# through the LauncherSpec. The default launcher's name is core's one fact (DEFAULT_LAUNCHER).
#: Files that still name a launcher, each for a reason (what is left to move):
LAUNCHER_ALLOWED = {
    # the SLURM implementation the built-in plugin names by import string; they stay in core because
    # batch scripts already submitted and the goldens run `python -m thub.launch.worker`
    "thub/launch/submit.py", "thub/launch/slurm.py", "thub/launch/worker.py", "thub/launch/push_job.py",
    "thub/launch/profiles.py",
    # the run directory's own folder of the SLURM scripts and attempts ("slurm/"), skipped by layouts
    "thub/runner/rundir.py", "thub/checkpoint/layouts.py",
}


def _launcher_names_in(path: Path, names: frozenset[str]) -> list[tuple[int, str]]:
    return sorted((node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names)


def test_the_core_names_no_launcher() -> None:
    from thub.launch.options import DEFAULT_LAUNCHER
    from thub.manager import load_registry

    names = frozenset(load_registry(entry_points=False).launchers) - {DEFAULT_LAUNCHER}
    assert "slurm" in names
    found = [f"{path.relative_to(CORE.parent)}:{line}: {name!r}"
             for path in sorted(CORE.rglob("*.py")) if str(path.relative_to(CORE.parent)) not in LAUNCHER_ALLOWED
             for line, name in _launcher_names_in(path, names)]
    assert not found, "the core names launchers (register them in a plugin instead):\n" + "\n".join(found)


def test_the_launcher_scan_finds_a_launcher_branch(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('def f(launch):\n    if launch.launcher == "slurm":\n        return 1\n')
    assert _launcher_names_in(tmp_path / "m.py", frozenset({"slurm"})) == [(2, "slurm")]


# --- core names no parameter dialect (issue 36 items 1, 2) ------------------------------------
# Training Hub's names, CLI and API are the built-in dialect thub_builtins.training_hub, registered
# through thub_register_dialects; core resolves through DialectSpec (thub.config.dialects).
#: (file, token) the core may still spell, each with its reason
DIALECT_ALLOWED = frozenset({
    ("manager.py", "thub_builtins.training_hub"),  # the list of built-in plugins, as for every built-in
    ("launch/plan.py", "training_hub_notes"),  # the plan's key for a dialect's notes: an output format
    ("ui/plan.py", "training_hub_notes"),
    ("ui/plan.py", "training-hub name "),  # how a note is printed: output unchanged
    ("cli/train.py", "training-hub name "),
    # the package face names the dialect's API statically (`from thub import *`, type checkers)
    ("__init__.py", "TrainingHubCallback"), ("__init__.py", "TrainingHubContext"),
    ("__init__.py", "TrainingHubControl"), ("__init__.py", "_TRAINING_HUB"),
})
_DIALECT_TOKEN = re.compile(r"training[_-]?hub", re.I)


def dialect_names_in(source: str) -> list[tuple[int, str]]:
    """(line, token) of every string constant (docstrings aside), identifier or import naming a
    Training Hub module or name."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            token = node.value
        elif isinstance(node, ast.Name):
            token = node.id
        elif isinstance(node, ast.alias):
            token = node.name
        elif isinstance(node, ast.ImportFrom):
            token = node.module or ""
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            token = node.name
        else:
            continue
        if _DIALECT_TOKEN.search(token) or token.startswith("thub.compat"):
            found.append((getattr(node, "lineno", 0), token))
    return found


def test_the_core_names_no_dialect() -> None:
    assert not (CORE / "compat").exists(), "core/thub/compat/ is back: a dialect is a plugin (thub_register_dialects)"
    found = [f"{path.relative_to(CORE)}:{line}: {token!r}"
             for path in sorted(CORE.rglob("*.py"))
             for line, token in dialect_names_in(path.read_text(encoding="utf-8"))
             if (str(path.relative_to(CORE)), token) not in DIALECT_ALLOWED]
    assert not found, "the core names Training Hub (register it through thub_register_dialects):\n" + "\n".join(found)


def test_the_dialect_scan_finds_a_dialect_import() -> None:
    source = ('"""Docs may say training_hub."""\n'
              "from thub_builtins.training_hub import names\n"
              "def f():\n    from thub.compat import training_hub_rules\n    return 'training-hub'\n")
    found = {token for _line, token in dialect_names_in(source)}
    assert {"thub_builtins.training_hub", "thub.compat", "training_hub_rules", "training-hub"} <= found
    assert "Docs may say training_hub." not in found  # docstrings are prose

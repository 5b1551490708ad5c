"""``thub_register_storage`` (issue 36 items 1, 2, 7): one registry of URI schemes for ``thub checkpoint push``
and the ``checkpoint_storage`` mirror.

thub's own schemes (hf, mlflow, s3, gs, file) are registered by the built-in plugin ``thub_builtins.storage``
like any other plugin's; both the push and the mirror read a URI through the one parser
(:func:`thub.checkpoint.storage.parse_uri`). ``tests/plugins/thub-plugin-memory-storage`` lives outside
thub's tree and adds ``memory://`` (fsspec's in-memory filesystem) through the hook alone: it is pip-installed
and found by its entry point, and pushed to and mirrored to in-process, byte for byte.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "plugins" / "thub-plugin-memory-storage"
#: what the outside plugin may import from thub: the documented public modules
PUBLIC = {"thub", "thub.specs"}
BUILTIN = ("hf", "mlflow", "s3", "gs", "file")

pytestmark = pytest.mark.needs_module("fsspec")


def _memory_plugin() -> Any:
    """The outside plugin's module, imported from its source folder (no install: the in-process tests)."""
    sys.path.insert(0, str(PLUGIN / "src"))
    try:
        import thub_plugin_memory_storage  # type: ignore[import-not-found]  # its own source folder
    finally:
        sys.path.remove(str(PLUGIN / "src"))
    return thub_plugin_memory_storage


@pytest.fixture
def memory_fs() -> Any:
    """fsspec's in-memory filesystem, emptied before and after (it is one store per process)."""
    import fsspec  # type: ignore[import-untyped]

    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "sub" / "notes.md").write_bytes(os.urandom(64))
    return folder


# --- the built-in schemes are a plugin's ---------------------------------------------------------------

def test_the_builtin_schemes_are_registered_by_the_builtin_plugin() -> None:
    from thub.manager import load_registry

    registry = load_registry(entry_points=False)
    assert list(registry.storage)[:5] == list(BUILTIN)
    for name in BUILTIN:
        assert registry.storage[name].provenance.plugin == "thub_builtins.storage", name
    assert {n for n in BUILTIN if "mirror" in registry.storage[n].supports} == {"s3", "gs", "file"}
    assert all("push" in registry.storage[n].supports for n in BUILTIN)
    assert registry.plugins["thub_builtins.storage"].registered["storage"] == list(BUILTIN)


def test_registering_storage_imports_no_driver_and_no_push_code() -> None:
    probe = ("import sys\nfrom thub.manager import load_registry\nload_registry(entry_points=False)\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fsspec', 's3fs', 'gcsfs', 'mlflow', "
             "'huggingface_hub') or m.startswith('thub_builtins.storage_') or m == 'thub.checkpoint.push'))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_duplicate_scheme_names_both_plugins(thub_plugin: Any) -> None:
    from thub import hookimpl
    from thub.specs import StorageSpec

    class Rival:
        @hookimpl
        def thub_register_storage(self, register: Any) -> None:
            register(StorageSpec(name="s3", summary="another s3", uri="s3://B/P"))

    registry = thub_plugin(("rival", Rival()), entry_points=False)
    [failure] = [f for f in registry.failures if f.name == "rival"]
    assert failure.stage == "register storage"
    assert "'s3' is already registered by thub_builtins.storage" in failure.error
    assert registry.storage["s3"].provenance.plugin == "thub_builtins.storage"


def test_a_bad_spec_is_refused_at_registration(thub_plugin: Any) -> None:
    from thub import hookimpl
    from thub.specs import StorageSpec

    class Bad:
        @hookimpl
        def thub_register_storage(self, register: Any) -> None:
            register(StorageSpec(name="S3 bucket", summary="", uri="x"))

    registry = thub_plugin(("bad", Bad()), entry_points=False)
    [failure] = [f for f in registry.failures if f.name == "bad"]
    assert "URI scheme" in failure.error and "S3 bucket" in failure.error
    assert "S3 bucket" not in registry.storage


# --- one parser: unknown schemes, push-only schemes --------------------------------------------------------

def _push_cli(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "MLFLOW_"))}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-storage-hook-tests-{os.getpid()}")
    return subprocess.run([sys.executable, "-m", "thub", "checkpoint", "push", *args], capture_output=True,
                          text=True, env=environ, timeout=300)


def test_an_unknown_scheme_lists_the_registered_ones_with_a_near_name(model: Path) -> None:
    done = _push_cli(str(model), "--to", "s4://bucket/model", "--force")
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("expected hf://ORG/NAME[@BRANCH], mlflow://MODEL_NAME[?tracking_uri=URI], s3://BUCKET/PREFIX, "
            "gs://BUCKET/PREFIX or file:///PATH") in done.stderr, done.stderr
    assert "did you mean 's3'" in done.stderr and "Traceback" not in done.stderr


def test_the_mirror_reads_uris_with_the_same_parser() -> None:
    from thub.runner.mirror import check_storage_uri

    with pytest.raises(ValueError, match=r"expected s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or file:///PATH "
                                         r"\(did you mean 'gs'\?\)"):
        check_storage_uri("gz://bucket/ckpt")
    for uri, reason in (("hf://org/name", "hf:// is a push target only"),
                        ("mlflow://model", "mlflow:// is a push target only")):
        with pytest.raises(ValueError) as caught:
            check_storage_uri(uri)
        assert reason in str(caught.value) and "checkpoint_storage" in str(caught.value), caught.value
        assert "expected s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or file:///PATH" in str(caught.value)
    assert check_storage_uri("file:///tmp/ckpt") == "file:///tmp/ckpt"


def test_the_push_help_lists_the_registered_shapes() -> None:
    done = _push_cli("--help")
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    assert "hf://ORG/NAME[@BRANCH], mlflow://MODEL_NAME[?tracking_uri=URI], s3://BUCKET/PREFIX," in flat, flat


# --- a scheme from outside the tree ------------------------------------------------------------------

def test_the_outside_plugin_imports_only_public_thub_modules() -> None:
    for source in (PLUGIN / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.split(".")[0] == "thub":
                    assert name in PUBLIC, f"{source.name} imports {name}, not a public thub module"


def _tree(fs: Any, root: str) -> dict[str, bytes]:
    return {path[len(root) + 1:]: fs.cat_file(path) for path in fs.find(root)}


@pytest.mark.needs_module("safetensors")
def test_the_outside_scheme_is_pushed_to_byte_for_byte(thub_plugin: Any, thub_cli: Any, model: Path,
                                                        memory_fs: Any) -> None:
    registry = thub_plugin(("memory-storage", _memory_plugin()), entry_points=False)
    assert registry.storage["memory"].provenance.plugin == "memory-storage"
    planned = thub_cli("checkpoint", "push", str(model), "--to", "memory://bucket/model", "--force", "--dry-run",
                       "--json")
    assert planned.exit_code == 0, planned.stderr
    assert planned.json()["kind"] == "memory" and not memory_fs.find("/bucket")
    done = thub_cli("checkpoint", "push", str(model), "--to", "memory://bucket/model", "--force", "--json")
    assert done.exit_code == 0, done.stderr
    sent = _tree(memory_fs, "/bucket/model")
    assert set(sent) == {"config.json", "sub/notes.md", "README.md", "thub_manifest.json"}, sorted(sent)
    assert sent["sub/notes.md"] == (model / "sub" / "notes.md").read_bytes()
    manifest = json.loads(sent["thub_manifest.json"])
    listed = {entry["path"]: entry["sha256"] for entry in manifest["files"]}
    assert listed["sub/notes.md"] == hashlib.sha256(sent["sub/notes.md"]).hexdigest()
    again = thub_cli("checkpoint", "push", str(model), "--to", "memory://bucket/model", "--force")
    assert again.exit_code == 2 and "already holds files" in again.stderr, again.stderr
    public = thub_cli("checkpoint", "push", str(model), "--to", "memory://bucket/other", "--force", "--public")
    assert public.exit_code == 2 and "only an hf:// target has a visibility" in public.stderr, public.stderr


@pytest.mark.needs_module("safetensors", "numpy")
def test_the_outside_scheme_holds_the_checkpoint_mirror(thub_plugin: Any, tmp_path: Path, memory_fs: Any) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    from thub.runner.mirror import MARKER, Mirror, check_storage_uri

    thub_plugin(("memory-storage", _memory_plugin()), entry_points=False)
    assert check_storage_uri("memory://bucket/ckpt") == "memory://bucket/ckpt"
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (run / "thub_run.json").write_text(json.dumps({"run_id": "run-1"}))
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": np.full((4, 4), 7, dtype=np.float32)}, str(checkpoint / "model.safetensors"))
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 4}))
    mirror = Mirror("memory://bucket/ckpt", run)
    mirror.offer(checkpoint, 2)
    summary = mirror.finish(timeout=600)  # a hang guard only
    assert summary["mirrored"] == ["checkpoint-2"] and not summary["failed"], summary
    remote = _tree(memory_fs, "/bucket/ckpt/run-1/checkpoint-2")
    assert remote["model.safetensors"] == (checkpoint / "model.safetensors").read_bytes()
    assert json.loads(remote[MARKER])["run_id"] == "run-1"


def test_the_push_only_outside_scheme_is_refused_for_the_mirror(thub_plugin: Any) -> None:
    from thub import hookimpl
    from thub.runner.mirror import check_storage_uri
    from thub.specs import StorageSpec

    class PushOnly:
        @hookimpl
        def thub_register_storage(self, register: Any) -> None:
            register(StorageSpec(name="vault", summary="a push-only store", uri="vault://NAME",
                                 supports=frozenset({"push"})))

    thub_plugin(("vault", PushOnly()), entry_points=False)
    with pytest.raises(ValueError, match="vault:// is a push target only"):
        check_storage_uri("vault://x")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin pip-installed (no dependencies) into its own folder, as a user would."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(PLUGIN)], check=True, capture_output=True, text=True)
    return target


def test_the_installed_plugin_is_found_by_its_entry_point(installed: Path, model: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(installed), os.environ.get("PYTHONPATH")])),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("THUB_PLUGINS", None)

    def thub(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=300)

    listing = thub("plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    [mine] = [p for p in json.loads(listing.stdout)["plugins"] if p["name"] == "memory-storage"]
    assert mine["registered"] == {"storage": ["memory"]} and mine["distribution"] == "thub-plugin-memory-storage"
    assert "memory://BUCKET/PREFIX" in " ".join(thub("checkpoint", "push", "--help").stdout.split())
    done = thub("checkpoint", "push", str(model), "--to", "memory://bucket/m", "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pushed" in done.stdout and "memory://bucket/m" in done.stdout

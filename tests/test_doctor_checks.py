"""``thub doctor``'s core checks against fabricated environments (fake nvidia-smi, fake
distributions in a temporary site-packages, a long TMPDIR, a fake libnccl.so exporting
ncclGetVersion). The runner and the CLI contract are tested in test_doctor.py."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from thub import hookimpl
from thub.cli.main import cli
from thub.doctor import blocking, format_problems, make_context, preflight, run_checks
from thub.manager import Registry, get_registry, load_registry, set_registry
from thub.specs import BackendSpec, CheckResult


def run_core(check_id: str, env: dict[str, str] | None = None, **context: str) -> CheckResult:
    """Run one core check through the runner with a fabricated environment."""
    spec = get_registry().checks[check_id]
    base = dict(os.environ)
    base.update(env or {})
    (outcome,) = run_checks([spec], make_context(env=base, **context))
    return outcome.result


# ---------------------------------------------------------------------------------------------
# core checks against fabricated environments


def test_long_tmpdir_fails_socket_check(real_registry: Registry, tmp_path: Path) -> None:
    long_dir = tmp_path / ("d" * max(1, 120 - len(str(tmp_path)) - 1))
    long_dir.mkdir()
    assert len(str(long_dir)) == 120
    result = CliRunner().invoke(cli, ["doctor", "core.socket-paths", "core.tmpdir", "--json"],
                                env={"TMPDIR": str(long_dir)}, catch_exceptions=False)
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    assert result.exit_code == 1
    assert checks["core.socket-paths"]["status"] == "fail"
    assert "export TMPDIR=/tmp/thub-tmp" in checks["core.socket-paths"]["fix"]
    assert checks["core.tmpdir"]["status"] == "ok"
    assert run_core("core.socket-paths", {"TMPDIR": "/tmp"}).status == "ok"
    ray = run_core("core.socket-paths", {"TMPDIR": "/tmp", "RAY_TMPDIR": "/" + "r" * 60})
    assert ray.status == "fail" and "RAY_TMPDIR" in ray.summary


def test_missing_tmpdir_fails(real_registry: Registry, tmp_path: Path) -> None:
    result = run_core("core.tmpdir", {"TMPDIR": str(tmp_path / "nope")})
    assert result.status == "fail" and "falls back to /tmp" in result.summary
    assert result.fix == f"mkdir -p {tmp_path / 'nope'}"


def test_output_dir(real_registry: Registry, tmp_path: Path) -> None:
    assert run_core("core.output-dir", output_dir=str(tmp_path / "new" / "run")).status == "ok"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = run_core("core.output-dir", output_dir=str(blocker / "run"))
    assert bad.status == "fail" and "not a directory" in bad.summary and bad.fix
    assert run_core("core.output-dir").status == "skip"


def test_low_disk_space(real_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.statvfs

    def tiny(path):  # type: ignore[no-untyped-def]
        result = real(path)
        return os.statvfs_result((result.f_bsize, 4096, 1_000_000, 1000, 100, 0, 0, 0, 0, 255))

    monkeypatch.setattr(os, "statvfs", tiny)
    result = run_core("core.disk", {"TMPDIR": str(tmp_path)}, output_dir=str(tmp_path / "out"))
    assert result.status == "fail" and "TMPDIR" in result.summary
    assert "export TMPDIR=" in (result.fix or "")
    monkeypatch.setattr(os, "statvfs", real)
    assert run_core("core.disk", {"TMPDIR": str(tmp_path)}).status in ("ok", "warn")


def test_hf_env(real_registry: Registry, tmp_path: Path) -> None:
    base = {"HF_HOME": str(tmp_path / "hf")}
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_CACHE",
                 "TRANSFORMERS_CACHE", "HF_HUB_ENABLE_HF_TRANSFER", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        base[name] = ""
    clean = {k: v for k, v in base.items() if v}

    def check(**extra: str) -> CheckResult:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "HUGGING"))}
        env.update(clean, **extra)
        spec = get_registry().checks["core.hf-env"]
        return run_checks([spec], make_context(env=env))[0].result

    assert check().status == "ok"
    offline = check(HF_HUB_OFFLINE="1")
    assert offline.status == "warn" and "holds no models" in offline.summary
    (tmp_path / "hf" / "hub" / "models--org--m").mkdir(parents=True)
    assert check(HF_HUB_OFFLINE="1").status == "ok"
    disagree = check(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="0")
    assert disagree.status == "warn" and "disagree" in disagree.summary
    deprecated = check(TRANSFORMERS_CACHE=str(tmp_path))
    assert deprecated.status == "warn" and "HF_HUB_CACHE" in (deprecated.fix or "")


def test_leftover_env_vars(real_registry: Registry) -> None:
    result = run_core("core.env-vars", {"VLLM_USE_V1": "0"})
    assert result.status == "warn" and result.fix == "unset VLLM_USE_V1"


FAKE_SMI = """#!/bin/sh
case "$*" in
  *query-gpu*) printf '%s\\n' \
      "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 79000, 81559, 9.0" \
      "1, GPU-bbbb, NVIDIA H100 80GB HBM3, 3, 81559, 9.0" ;;
  *query-compute-apps*) printf '%s\\n' "4242, GPU-aaaa, 78000, python" ;;
  *) printf '%s\\n' "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |" ;;
esac
"""

BROKEN_SMI = """#!/bin/sh
echo "Failed to initialize NVML: Driver/library version mismatch"
echo "NVML library version: 550.54"
exit 18
"""


def _fake_tool(directory: Path, name: str, script: str) -> dict[str, str]:
    directory.mkdir(exist_ok=True)
    tool = directory / name
    tool.write_text(script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_fake_nvidia_smi_gpus_and_memory(real_registry: Registry, tmp_path: Path) -> None:
    env = _fake_tool(tmp_path / "bin", "nvidia-smi", FAKE_SMI)
    gpus = run_core("core.gpus", env)
    assert gpus.status == "ok" and "2 GPU(s) visible" in gpus.summary
    memory = run_core("core.gpu-memory", env)
    assert memory.status == "warn" and "4242" in memory.summary
    assert "kill 4242" in (memory.fix or "") and "ps -o pid" in (memory.fix or "")
    assert any("78000 MiB on GPU 0" in d for d in memory.details)
    only_second = run_core("core.gpu-memory", {**env, "CUDA_VISIBLE_DEVICES": "1"})
    assert only_second.status == "ok"
    hidden = run_core("core.gpus", {**env, "CUDA_VISIBLE_DEVICES": "0,7"})
    assert hidden.status == "warn" and "'7' is no GPU here" in hidden.summary
    assert hidden.fix and hidden.fix.startswith("export CUDA_VISIBLE_DEVICES=0,1")
    # torch here is a CPU build (+cpu) or has no local label: either way nothing crashes
    assert run_core("core.cuda-driver", env).status in ("ok", "warn", "skip")


def test_nvml_mismatch_fails_with_reboot_fix(real_registry: Registry, tmp_path: Path) -> None:
    env = _fake_tool(tmp_path / "bin", "nvidia-smi", BROKEN_SMI)
    result = run_core("core.gpus", env)
    assert result.status == "fail" and "Driver/library version mismatch" in result.summary
    assert "reboot" in (result.fix or "")
    assert run_core("core.gpu-memory", env).status == "skip"


def test_torch_cuda_newer_than_driver(real_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_builtins.checks import gpu

    env = _fake_tool(tmp_path / "bin", "nvidia-smi", FAKE_SMI)
    monkeypatch.setattr(gpu, "dist_version", lambda name: "2.9.0+cu130" if name == "torch" else None)
    monkeypatch.setattr(gpu, "torch_cuda_build", lambda: ("cuda", (13, 0)))
    result = run_core("core.cuda-driver", env)
    assert result.status == "fail" and "supports only CUDA 12.2" in result.summary
    assert "download.pytorch.org/whl/cu122" in (result.fix or "")
    monkeypatch.setattr(gpu, "torch_cuda_build", lambda: ("cuda", (12, 1)))
    assert run_core("core.cuda-driver", env).status == "ok"
    monkeypatch.setattr(gpu, "torch_cuda_build", lambda: ("cpu", None))
    assert run_core("core.cuda-driver", env).status == "warn"


def _fake_dist(site: Path, name: str, version: str, requires: tuple[str, ...] = (),
               files: dict[str, bytes | str] | None = None, extras: tuple[str, ...] = ()) -> None:
    """A distribution as pip leaves it: NAME-VERSION.dist-info with METADATA and RECORD."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    record = [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    for rel, content in (files or {}).items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        record.append(f"{rel},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty temporary site-packages at the front of sys.path."""
    directory = tmp_path / "site-packages"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    return directory


def test_compromised_litellm(real_registry: Registry, site: Path) -> None:
    assert run_core("core.compromised").status == "ok"
    _fake_dist(site, "litellm", "1.82.7")
    result = run_core("core.compromised")
    assert result.status == "fail" and "litellm 1.82.7" in result.summary
    assert "'litellm<1.82.7'" in (result.fix or "") and "rotate" in (result.fix or "")


def test_flashinfer_mismatch(real_registry: Registry, site: Path) -> None:
    assert run_core("core.flashinfer").status == "skip"
    _fake_dist(site, "flashinfer-python", "0.6.4")
    _fake_dist(site, "flashinfer-cubin", "0.6.8.post1")
    result = run_core("core.flashinfer")
    assert result.status == "fail" and "0.6.8.post1" in result.summary
    assert "flashinfer-cubin==0.6.4" in (result.fix or "")


def test_flashinfer_match(real_registry: Registry, site: Path) -> None:
    _fake_dist(site, "flashinfer-python", "0.6.4")
    _fake_dist(site, "flashinfer-cubin", "0.6.4")
    _fake_dist(site, "flashinfer-jit-cache", "0.6.4+cu128")
    assert run_core("core.flashinfer").status == "ok"


def test_conflicting_requirements(real_registry: Registry, site: Path) -> None:
    assert run_core("core.conflicts").status == "ok"
    _fake_dist(site, "somelib", "1.0", requires=("numpy<1",))
    outside = run_core("core.conflicts")
    assert outside.status == "warn" and any("somelib 1.0 requires numpy<1" in d for d in outside.details)
    _fake_dist(site, "thub-plugin-fake", "0.1", requires=("yylib>=2", 'unsloth>=9; extra == "train"'),
               extras=("train",))
    _fake_dist(site, "yylib", "1.0")
    ours = run_core("core.conflicts")
    assert ours.status == "fail"
    assert any("thub-plugin-fake 0.1 requires yylib>=2" in d for d in ours.details)
    assert "'yylib>=2'" in (ours.fix or "")
    assert not any("unsloth" in d for d in ours.details)  # an extra that is not installed is fine


def test_conflicts_fix_never_breaks_what_is_installed(real_registry: Registry, site: Path) -> None:
    # Issue 15: a pin that contradicts another installed distribution's need is never a pip line
    # (it would break that one); the plugin that wants it gets an environment of its own.
    _fake_dist(site, "zzlib", "1.0")
    _fake_dist(site, "zzuser", "1.0", requires=("zzlib<2",))
    _fake_dist(site, "yylib", "1.0")
    _fake_dist(site, "thub-plugin-fake", "0.1", requires=("zzlib>=2", "yylib>=2"))
    result = run_core("core.conflicts")
    assert result.status == "fail"
    fix = result.fix or ""
    assert "thub install --package thub-plugin-fake --into managed" in fix and "zzuser 1.0 needs: <2" in fix
    pip_lines = [line for line in fix.splitlines() if "pip install" in line]
    assert pip_lines and "yylib>=2" in pip_lines[0] and not any("zzlib" in line for line in pip_lines)


def test_pins_read_the_installed_metadata_once(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one pass over the installed distributions for all of a backend's pins, not one per pin
    from importlib import metadata

    from thub_builtins.checks import pins

    _fake_dist(site, "zzlib", "1.0")
    _fake_dist(site, "zzuser", "1.0", requires=("zzlib<2",))
    passes: list[int] = []
    real = metadata.distributions
    monkeypatch.setattr(metadata, "distributions", lambda *a, **k: passes.append(1) or real(*a, **k))
    backend = BackendSpec("x", "pins", {"lora_sft": frozenset()}, "nowhere:run")
    conflicts = pins.conflicting_pins(backend, ["zzlib>=2", "yylib>=2", "zzuser>=1"], [])
    assert conflicts == ["zzlib>=2 (installed zzlib 1.0 is what zzuser 1.0 needs: <2)"]
    assert len(passes) == 1

def test_flash_attn_built_against_other_torch(real_registry: Registry, site: Path) -> None:
    _fake_dist(site, "flash-attn", "2.8.3", files={
        "flash_attn_2_cuda.py": "raise ImportError('flash_attn_2_cuda.so: undefined symbol: "
                                "_ZN3c104cuda9SetDeviceEi')\n",
    })
    result = run_core("core.flash-attn", {"PYTHONPATH": str(site)})
    assert result.status == "fail" and "undefined symbol" in result.summary
    assert "--no-build-isolation --force-reinstall" in (result.fix or "")
    (site / "flash_attn_2_cuda.py").write_text("")
    assert run_core("core.flash-attn", {"PYTHONPATH": str(site)}).status == "ok"


FAKE_NCCL_C = "int ncclGetVersion(int *version) { *version = %d; return 0; }\n"


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the fake libnccl")
@pytest.mark.parametrize(("code", "status"), [(22809, "fail"), (22705, "ok")])
def test_nccl_library_vs_metadata(real_registry: Registry, site: Path, tmp_path: Path, code: int, status: str) -> None:
    source = tmp_path / "nccl.c"
    source.write_text(FAKE_NCCL_C % code)
    library = tmp_path / "libnccl.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    _fake_dist(site, "nvidia-nccl-cu12", "2.27.5", files={"nvidia/nccl/lib/libnccl.so.2": library.read_bytes()})
    result = run_core("core.nccl")
    assert result.status == status, result
    if status == "fail":
        assert "NCCL 2.28.9" in result.summary and "pip says nvidia-nccl-cu12 2.27.5" in result.summary
        assert "--force-reinstall nvidia-nccl-cu12==2.27.5" in (result.fix or "")


def test_gdn_kernels_need_toolkit(real_registry: Registry, site: Path, tmp_path: Path) -> None:
    _fake_dist(site, "flash-linear-attention", "0.4.0")
    old = _fake_tool(tmp_path / "bin", "nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    result = run_core("core.gdn-kernels", {**old, "CUDA_HOME": ""})
    assert result.status == "fail" and "12.4" in result.summary and "cuda-toolkit-12-8" in (result.fix or "")


def test_backend_requirements_without_backend_warn(fake_registry: Registry) -> None:
    result = run_core("core.backend-requirements")
    assert result.status == "warn" and "fakebe" in result.summary
    assert run_core("core.backend-requirements", backend="otherbe").status == "ok"


class GpuPlugin:
    """A GPU backend with an install hint, and a CPU backend sharing its algorithm."""

    @hookimpl
    def thub_register_backends(self, register):  # type: ignore[no-untyped-def]
        register(BackendSpec("gpube", "gpu backend", {"grpo": frozenset()}, "nowhere:run", needs_cuda=True,
                             requirements=("thub-surely-not-installed>=1", "packaging"),
                             install="pip install 'thub-plugin-gpube[gpu]'  # CUDA torch first"))
        register(BackendSpec("cpube", "cpu backend", {"grpo": frozenset()}, "nowhere:run", priority=3))
        register(BackendSpec("cpusft", "cpu sft backend", {"sft": frozenset()}, "nowhere:run", priority=9))


@pytest.fixture
def gpu_registry() -> Iterator[Registry]:
    set_registry(load_registry(extra_plugins=[("gpuplugin", GpuPlugin())], entry_points=False))
    try:
        yield get_registry()
    finally:
        set_registry(None)


def test_selected_backend_messages(gpu_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    import thub.selection

    # both problems: the GPU first, the missing library named too; fix: a CPU backend and the install hint
    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: False)
    both = run_core("core.backend-requirements", backend="gpube")
    assert both.status == "fail"
    assert both.summary == ("backend gpube needs an NVIDIA GPU; none found "
                            "(and is missing thub-surely-not-installed>=1)")
    assert both.details == ("thub-surely-not-installed is not installed (needs thub-surely-not-installed>=1)",)
    assert both.fix == ("# run on a machine with an NVIDIA GPU, or use a backend that trains on CPU: `--backend cpube`"
                        "\npip install 'thub-plugin-gpube[gpu]'  # CUDA torch first")
    # libraries present: only the GPU
    monkeypatch.setattr(thub.selection, "requirement_problem", lambda spec: None)
    gpu = run_core("core.backend-requirements", backend="gpube")
    assert (gpu.status, gpu.summary) == ("fail", "backend gpube needs an NVIDIA GPU; none found")
    assert gpu.fix == "# run on a machine with an NVIDIA GPU, or use a backend that trains on CPU: `--backend cpube`"
    # a GPU: ok
    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: True)
    assert run_core("core.backend-requirements", backend="gpube").status == "ok"
    # preflight (what `thub train` runs) blocks on it and prints it
    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: False)
    outcomes = preflight("gpube", None)
    assert "backend gpube needs an NVIDIA GPU; none found" in format_problems(blocking(outcomes))


def test_selected_backend_missing_library(gpu_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    import thub.selection

    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: True)
    result = run_core("core.backend-requirements", backend="gpube")
    assert (result.status, result.summary) == ("fail", "backend gpube is missing thub-surely-not-installed>=1")
    assert result.fix == "pip install 'thub-plugin-gpube[gpu]'  # CUDA torch first"


def test_selected_backend_without_install_hint(fake_registry: Registry) -> None:
    result = run_core("core.backend-requirements", backend="fakebe")
    assert (result.status, result.summary) == ("fail", "backend fakebe is missing thub-surely-not-installed>=1")
    assert "install" in (result.fix or "") and "thub-surely-not-installed>=1" in (result.fix or "")


def test_doctor_backend_prints_the_gpu_message(gpu_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    import thub.selection

    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: False)
    monkeypatch.setattr(thub.selection, "requirement_problem", lambda spec: None)
    result = CliRunner().invoke(cli, ["doctor", "--backend", "gpube", "core.backend-requirements", "--json"])
    assert result.exit_code == 1, result.output
    (check,) = json.loads(result.stdout)["checks"]
    assert check["summary"] == "backend gpube needs an NVIDIA GPU; none found" and "--backend cpube" in check["fix"]

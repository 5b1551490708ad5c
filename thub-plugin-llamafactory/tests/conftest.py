"""LLaMA-Factory's managed environment, built once per test session with ``thub install``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest


def thub_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment for a thub subprocess that uses the managed LLaMA-Factory (the plugin
    installed in the test environment itself is hidden, so the managed one is the backend)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update({"THUB_DATA_DIR": str(data_dir), "THUB_DISABLE_PLUGINS": "llamafactory",
                    "CUDA_VISIBLE_DEVICES": "", **extra})
    return environ


def cpu_only_fix(env: Path) -> None:
    """Make PyPI's CUDA builds of torchvision/torchaudio harmless next to the ``+cpu`` torch.

    CI reaches only PyPI, whose torchvision/torchaudio wheels link CUDA libraries (the CPU builds
    live on the PyTorch index): torchvision then fails to import (``torchvision::nms does not
    exist``) and so does every transformers model import that probes it, and torchaudio's
    extension fails to load (``libc10_cuda.so``). LLaMA-Factory's text path never imports
    torchvision, and imports torchaudio only at module level: remove torchvision and torchaudio's
    compiled extensions (it then imports without them). A GPU machine or the CPU index needs none
    of this (README).
    """
    python = env / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision"], check=True,
                   capture_output=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    for library in (site / "torchaudio" / "lib").glob("*.so"):
        library.unlink()


@pytest.fixture(scope="session")
def lf_env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``thub install llamafactory --into managed`` for real (about 1.5 min on two cores)."""
    try:
        torch = f"torch=={metadata.version('torch')}"
    except metadata.PackageNotFoundError:  # pragma: no cover - CI installs the CPU torch first
        pytest.skip("no torch beside thub to pin")
    reuse = os.environ.get("LLAMAFACTORY_TEST_DATA_DIR")  # a data dir with the env built (development)
    if reuse and (Path(reuse) / "envs" / "llamafactory" / "thub-env.json").exists():
        env = Path(reuse) / "envs" / "llamafactory"
        from thub.envs.installer import refresh_manifest
        from thub.envs.manifest import read_manifest

        # the manifest keeps the backend's registration as installed: describe the plugin again (it
        # is installed editable there), so a new algorithm of this checkout is the managed env's too
        refresh_manifest(read_manifest(env / "thub-env.json"))
        manifest = json.loads((env / "thub-env.json").read_text())
        return {"data_dir": Path(reuse), "path": env, "python": str(env / "bin" / "python"), "manifest": manifest,
                "environ": thub_env(Path(reuse))}
    data_dir = tmp_path_factory.mktemp("thub-data")
    done = subprocess.run([sys.executable, "-m", "thub", "install", "llamafactory", "--into", "managed",
                           "--installer", "pip", "--torch", torch, "--json"],
                          capture_output=True, text=True, env=thub_env(data_dir), timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    env = data_dir / "envs" / "llamafactory"
    if "+cpu" in torch:
        cpu_only_fix(env)
    manifest = json.loads((env / "thub-env.json").read_text())
    return {"data_dir": data_dir, "path": env, "python": str(env / "bin" / "python"), "manifest": manifest,
            "environ": thub_env(data_dir)}


#: Pairs with one clear preference (a polite answer over a curt one): on the tiny model the DPO
#: margin rises within a few steps at a high learning rate. Prompts vary (some with a system turn,
#: one with an earlier exchange) as thub's canonical dpo rows do.
TOPICS = ("the weather", "a book", "the sea", "music", "a garden", "trains", "coffee", "the moon")


def preference_rows() -> tuple[list[dict], list[dict]]:
    """(dpo rows, kto rows) in thub's canonical shape: prompt/chosen/rejected, prompt/completion/label."""
    dpo, kto = [], []
    for i, topic in enumerate(TOPICS):
        prompt = [{"role": "system", "content": "Answer kindly."}] if i % 3 == 0 else []
        if i == 5:
            prompt += [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello, friend"}]
        prompt.append({"role": "user", "content": f"Tell me about {topic}."})
        good = [{"role": "assistant", "content": f"Thank you for asking about {topic}, it is lovely."}]
        bad = [{"role": "assistant", "content": "No."}]
        dpo.append({"prompt": prompt, "chosen": good, "rejected": bad})
        kto.append({"prompt": prompt, "completion": good if i % 2 == 0 else bad, "label": i % 2 == 0})
    return dpo, kto


@pytest.fixture(scope="session")
def preference_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{"dpo": dpo.jsonl, "kto": kto.jsonl}`` written from :func:`preference_rows`."""
    folder = tmp_path_factory.mktemp("preference")
    files = {}
    for name, rows in zip(("dpo", "kto"), preference_rows(), strict=True):
        files[name] = folder / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return files

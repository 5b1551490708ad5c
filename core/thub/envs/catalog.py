"""Which distribution provides a backend, what it installs, and where its source is.

A backend name (``trl``, ``mini-trainer``, ...) maps to a plugin distribution
(``thub-plugin-trl``), the extras that bring its training library on any machine
(``default_extras``) and those that only make sense with an NVIDIA GPU (``gpu_extras``), and
whether it needs torch (thub then installs a CPU-safe torch first; see :mod:`thub.envs.planner`).

Sources, first found wins: a plugin folder next to thub's own source when thub runs from a
checkout (``<checkout>/thub-plugin-trl``), a folder under ``$THUB_PLUGIN_SOURCES``, else the
package index (``thub-plugin-trl``). ``thub install ./path/to/plugin`` installs any plugin
folder; ``thub install --package 'thub-plugin-x>=1'`` any requirement.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse


@dataclass(frozen=True)
class PluginEntry:
    """What ``thub install NAME`` installs."""

    name: str
    distribution: str
    folder: str
    default_extras: tuple[str, ...] = ()
    gpu_extras: tuple[str, ...] = ()
    needs_torch: bool = True
    notes: str = ""
    #: Algorithms its backend runs, to advise a backend for an algorithm before any plugin is
    #: installed (tests/test_first_contact.py checks them against the installed plugins).
    algorithms: tuple[str, ...] = ()
    #: GPU extras that bring the training library itself (it pulls CUDA packages on every
    #: machine, so a GPU-less install asks for it by name with ``--extra``).
    library_extras: tuple[str, ...] = ()
    #: ``backend`` (registers a training backend) or ``evaluator`` (registers a ``thub eval``
    #: evaluator, which runs in thub's own environment: never a managed one)
    kind: Literal["backend", "evaluator"] = "backend"

    def install_command(self, *, into: str | None = None, gpu: bool = False) -> str:
        """The ``thub install`` command line that installs this backend with its library:
        ``--gpu`` on a GPU machine, else ``--extra`` for a library that only a GPU extra brings.
        The one fix the doctor prints for a missing library (tests/test_first_contact_round2.py
        parses it against the real CLI)."""
        parts = ["thub install", self.name]
        if into:
            parts.append(f"--into {into}")
        if gpu and self.gpu_extras:
            parts.append("--gpu")
        else:
            parts.extend(f"--extra {extra}" for extra in self.library_extras)
        return " ".join(parts)


CATALOG: dict[str, PluginEntry] = {
    entry.name: entry
    for entry in (
        PluginEntry("trl", "thub-plugin-trl", "thub-plugin-trl", gpu_extras=("cuda",),
                    notes="TRL + PEFT + transformers; trains on CPU or GPU",
                    algorithms=("sft", "lora_sft", "grpo", "lora_grpo", "dpo", "kto")),
        PluginEntry("mini-trainer", "thub-plugin-minitrainer", "thub-plugin-minitrainer",
                    default_extras=("mini-trainer",), gpu_extras=("cuda",),
                    notes="rhai-innovation-mini-trainer (datasets>=5); trains on NVIDIA GPUs; "
                          "[cuda] adds flash-attn and mamba-ssm (source builds, need nvcc)",
                    algorithms=("sft", "osft")),
        PluginEntry("instructlab", "thub-plugin-instructlab", "thub-plugin-instructlab",
                    gpu_extras=("cuda",),
                    notes="instructlab-training; trains on NVIDIA GPUs; [cuda] adds flash-attn, "
                          "mamba-ssm, bitsandbytes (source builds)",
                    algorithms=("sft",)),
        # unsloth pulls triton, bitsandbytes and xformers on every machine: like axolotl's, its
        # library comes with --gpu (or --extra unsloth for its CPU fallback)
        PluginEntry("unsloth", "thub-plugin-unsloth", "thub-plugin-unsloth", gpu_extras=("unsloth",),
                    library_extras=("unsloth",),
                    notes="unsloth (datasets<5, trl<=1.15, requires triton): conflicts with mini-trainer and trl "
                          "1.16, use --into managed --gpu (or --extra unsloth without a GPU)",
                    algorithms=("lora_sft",)),
        PluginEntry("art", "thub-plugin-art", "thub-plugin-art", gpu_extras=("backend",),
                    library_extras=("backend",),
                    notes="openpipe-art; [backend] pins a CUDA torch 2.10", algorithms=("lora_grpo",)),
        PluginEntry("verl", "thub-plugin-verl", "thub-plugin-verl", gpu_extras=("gpu",), library_extras=("gpu",),
                    notes="verl; its [gpu] extra (verl[vllm]) pins torch 2.11 and vllm 0.24",
                    algorithms=("grpo", "lora_grpo")),
        PluginEntry("llamafactory", "thub-plugin-llamafactory", "thub-plugin-llamafactory",
                    default_extras=("llamafactory",),
                    notes="llamafactory 0.9.5 (transformers<=5.6, datasets<=4.0, trl<=0.24): conflicts with "
                          "trl 1.16 and mini-trainer, use --into managed; trains on CPU or GPU",
                    algorithms=("sft", "lora_sft", "dpo", "kto")),
        # axolotl itself requires triton and nvidia-ml-py (CUDA packages) on every machine: a GPU-less
        # install gets the plugin only unless asked (--gpu, or --extra axolotl on a CPU machine)
        PluginEntry("axolotl", "thub-plugin-axolotl", "thub-plugin-axolotl", gpu_extras=("axolotl",),
                    library_extras=("axolotl",),
                    notes="axolotl 0.19 (transformers==5.16.1, datasets==4.8.4, trl==1.9.0, peft==0.20.0; "
                          "4.3 GB; requires triton): use --into managed --gpu (or --extra axolotl without a "
                          "GPU); its PyPI dependency `art` collides with openpipe-art",
                    algorithms=("sft", "lora_sft", "dpo", "kto")),
        PluginEntry("sentence-transformers", "thub-plugin-sentence-transformers", "thub-plugin-sentence-transformers",
                    notes="sentence-transformers (embedding_sft: contrastive fine-tuning of embedding models); trains "
                          "on CPU or GPU", algorithms=("embedding_sft",)),
        PluginEntry("gepa", "thub-plugin-gepa", "thub-plugin-gepa", needs_torch=False,
                    notes="gepa + litellm (prompt optimisation against an OpenAI-compatible endpoint; no torch); "
                          "runs on CPU", algorithms=("gepa",)),
        PluginEntry("lmeval", "thub-plugin-lmeval", "thub-plugin-lmeval", gpu_extras=("vllm",), kind="evaluator",
                    notes="EleutherAI lm-evaluation-harness 0.4 for thub eval (HF model on CPU or GPU); [vllm] "
                          "adds its vLLM model, GPU only"),
    )
}
ALIASES = {"minitrainer": "mini-trainer", "mini_trainer": "mini-trainer", "ilab": "instructlab",
           "instructlab-training": "instructlab",  # the name its plugin registers the backend under
           "llama-factory": "llamafactory", "lf": "llamafactory"}


def match_name(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that ``name`` means: itself, its case-folded form or its alias."""
    names = list(names)
    if name in names:
        return name
    folded = {n.casefold(): n for n in names}
    key = name.casefold()
    return folded.get(key) or folded.get(ALIASES.get(key, key))


def catalog_entry(name: str) -> PluginEntry | None:
    """The catalog entry ``name`` means (backend name in any case, alias or distribution)."""
    key = match_name(name, CATALOG)
    if key is not None:
        return CATALOG[key]
    folded = name.casefold()
    return next((e for e in CATALOG.values() if e.distribution == folded), None)


def backends_running(algorithm: str) -> list[PluginEntry]:
    """Catalog backends that run ``algorithm``, in catalog order (the CPU-capable trl first)."""
    return [entry for entry in CATALOG.values() if algorithm in entry.algorithms]


def install_advice(algorithm: str) -> str:
    """``thub install NAME`` for the backends that run ``algorithm`` (never one that cannot)."""
    entries = backends_running(algorithm)
    if not entries:
        return "no backend thub can install runs it (see `thub algorithms` for the plugin that added it)"
    return "install a backend that runs it: " + " or ".join(f"`thub install {e.name}`" for e in entries)


def unknown_backend_message(name: str, installed: Iterable[str]) -> str:
    """Why ``--backend NAME`` matched no installed backend, and the command that installs it."""
    from thub.errors import did_you_mean

    installed = sorted(installed)
    have = f"installed: {', '.join(installed) or 'none'}"
    known = f"backends thub can install: {', '.join(CATALOG)}"
    entry = catalog_entry(name)
    if entry is not None:
        return (f"backend {entry.name!r} is not installed ({have}); install it with `thub install {entry.name}` "
                f"({known})")
    hint = did_you_mean(name, dict.fromkeys([*installed, *CATALOG]))
    return f"unknown backend {name!r}{hint}; {have}; {known} (`thub install NAME`)"


@dataclass(frozen=True)
class Source:
    """One thing to install: a plugin distribution from a folder or a requirement."""

    name: str                 # the environment name it gets by default
    distribution: str | None  # known before installing (None for an unknown requirement)
    target: str               # folder path or requirement text, as given to pip
    local: bool
    entry: PluginEntry | None = None
    extras: tuple[str, ...] = field(default=())

    @property
    def evaluator(self) -> bool:
        """Whether this installs a ``thub eval`` evaluator (thub's own environment only)."""
        return self.entry is not None and self.entry.kind == "evaluator"

    def argument(self) -> str:
        """The pip argument, extras included (``/path[extra]`` or ``name[extra]>=1``)."""
        if not self.extras:
            return self.target
        extras = f"[{','.join(self.extras)}]"
        if self.local:
            return f"{self.target}{extras}"
        from packaging.requirements import Requirement

        req = Requirement(self.target)
        req.extras = set(req.extras) | set(self.extras)
        return str(req)


def thub_checkout() -> Path | None:
    """The source folder thub runs from when installed editable (a development checkout)."""
    try:
        dist = metadata.distribution("thub")
    except metadata.PackageNotFoundError:
        return None
    raw = dist.read_text("direct_url.json")
    if not raw:
        return None
    import json

    info = json.loads(raw)
    url = urlparse(info.get("url", ""))
    if url.scheme != "file" or not info.get("dir_info", {}).get("editable"):
        return None
    path = Path(unquote(url.path))
    return path if (path / "pyproject.toml").exists() else None


def _search_dirs() -> list[Path]:
    dirs = [Path(p).expanduser() for p in os.environ.get("THUB_PLUGIN_SOURCES", "").split(os.pathsep) if p]
    checkout = thub_checkout()
    if checkout:
        dirs.append(checkout)
    return dirs


def project_name(folder: Path) -> str | None:
    """The distribution name declared by ``folder/pyproject.toml``."""
    try:
        data = tomllib.loads((folder / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return data.get("project", {}).get("name")


def resolve_source(spec: str, extras: tuple[str, ...] = (), gpu: bool = False, *, package: bool = False) -> Source:
    """Turn what the user typed (backend name, folder, requirement) into a :class:`Source`.

    ``extras`` are added to the entry's default extras; ``gpu`` adds its GPU-only extras.
    A requirement (any package index name) is accepted only with ``package=True``
    (``thub install --package SPEC``): a mistyped backend name must never install whatever
    the index holds under that name.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    if package:
        try:
            req = Requirement(spec)
        except InvalidRequirement as exc:
            raise ValueError(f"--package {spec!r}: expected a requirement such as 'thub-plugin-x>=1' ({exc})") from None
        return Source(_env_name(req.name), req.name, spec, False, None, tuple(extras))
    path = Path(spec).expanduser()
    if ("/" in spec or spec.startswith(".")) and (path / "pyproject.toml").exists():
        dist = project_name(path) or path.name
        known = next((e for e in CATALOG.values() if e.distribution == dist), None)
        if known is not None:  # a known plugin's folder: its name and extras as for `thub install NAME`
            wanted = tuple(dict.fromkeys((*known.default_extras, *(known.gpu_extras if gpu else ()), *extras)))
            return Source(known.name, dist, str(path.resolve()), True, known, wanted)
        return Source(_env_name(dist), dist, str(path.resolve()), True, None, tuple(extras))
    entry = catalog_entry(spec)
    if entry is not None:
        wanted = tuple(dict.fromkeys((*entry.default_extras, *(entry.gpu_extras if gpu else ()), *extras)))
        for folder in _search_dirs():
            candidate = folder / entry.folder
            if (candidate / "pyproject.toml").exists():
                return Source(entry.name, entry.distribution, str(candidate.resolve()), True, entry, wanted)
        return Source(entry.name, entry.distribution, entry.distribution, False, entry, wanted)
    from thub.errors import closest

    close = closest(spec.casefold(), [*CATALOG, *ALIASES])
    hint = f" (did you mean {ALIASES.get(close, close)!r}?)" if close else ""
    if "/" in spec or spec.startswith("."):
        what = f"{spec!r} is not a plugin folder (no pyproject.toml)"
    else:
        what = f"unknown backend {spec!r}{hint}"
    backends = ", ".join(name for name, entry in CATALOG.items() if entry.kind == "backend")
    evaluators = ", ".join(name for name, entry in CATALOG.items() if entry.kind == "evaluator")
    raise ValueError(f"{what}; thub installs the backends {backends}, the evaluator {evaluators}, "
                     "a plugin folder (./path), or any requirement given with --package 'SPEC'")


def _env_name(distribution: str) -> str:
    name = distribution.lower().replace("_", "-")
    return name.removeprefix("thub-plugin-") or name

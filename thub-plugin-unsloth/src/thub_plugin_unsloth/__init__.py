"""thub backend ``unsloth``: registration only. unsloth, TRL and torch are imported in ``runner``."""

from __future__ import annotations

from collections.abc import Callable

from thub.backend import BackendSpec, CheckContext, CheckResult, CheckSpec, MemoryPolicy, hookimpl, translation_hook
from thub_plugin_unsloth.translate import BACKEND, DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json). The ranges are
# unsloth 2026.10.9's own Requires-Dist for the libraries thub's runner calls directly.
REQUIREMENTS = (
    "unsloth>=2026.1.1",
    "unsloth_zoo>=2026.1.1",
    "trl>=0.18.2,<=1.15.0",
    "transformers>=4.52.4,<=5.17.0",
    "datasets>=3.4.1,<5",
    "peft>=0.18",
    "torch>=2.4,<2.15",
)
# Libraries whose range unsloth pins and other thub backends need in other versions.
CONFLICT_PRONE = ("trl", "transformers", "datasets", "torch", "peft", "accelerate")
# What `thub install` runs for it (thub and its plugins are on no package index): an environment of
# its own, with the torch beside thub pinned (so pip picks the torchvision that matches it).
INSTALL = "thub install unsloth --into managed --gpu   # without a GPU (CPU fallback): --extra unsloth instead of --gpu"
DOCS = "thub-plugin-unsloth/README.md"


MEMORY = MemoryPolicy(
    summary="unsloth: LoRA on a frozen 16-bit (or 4/8-bit) base, checkpointed activations offloaded to "
            "CPU memory (use_gradient_checkpointing='unsloth'), fused linear cross-entropy, one GPU",
    checkpointing="offloaded", sharding="ddp", loss="fused", rollout="colocated",
    source="unsloth FastLanguageModel.get_peft_model(use_gradient_checkpointing='unsloth'); "
           "unsloth_zoo.loss_utils.unsloth_fused_ce_loss (UNSLOTH_ENABLE_CCE=1)",
)


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=BACKEND,
        summary="unsloth: fast LoRA/QLoRA fine-tuning on one NVIDIA GPU (CPU fallback for tiny tests).",
        algorithms=HONOURED,
        runner="thub_plugin_unsloth.runner:run",
        requirements=REQUIREMENTS,
        install=INSTALL,
        # unsloth_zoo falls back to stock transformers + PEFT on a machine without an accelerator
        needs_cuda=False,
        priority=20,
        defaults=DEFAULTS,
        launcher="python",
        memory=MEMORY,
        docs=DOCS,
    ))


thub_translate_params = translation_hook(BACKEND, translate)


def unsloth_conflicts(requires: list[str] | None = None) -> list[str]:
    """Installed libraries outside the ranges unsloth's own metadata declares.

    ``requires`` is unsloth's Requires-Dist; read from the installed distribution's metadata when
    given None, else thub's copy of unsloth 2026.10.9's ranges (unsloth not installed: what an
    install into this environment would downgrade).
    """
    from importlib import metadata

    from packaging.requirements import Requirement

    from thub.backend import installed_version

    if requires is None:
        try:
            requires = metadata.requires("unsloth") or []
        except metadata.PackageNotFoundError:
            requires = list(REQUIREMENTS[2:])
    problems = []
    for line in requires:
        requirement = Requirement(line)
        if requirement.name.lower() not in CONFLICT_PRONE or (requirement.marker and not requirement.marker.evaluate()):
            continue
        installed = installed_version(requirement.name)  # metadata read once per process (thub.installed)
        if installed is None:
            continue
        if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
            problems.append(f"{requirement.name} {installed} is installed; unsloth needs "
                            f"{requirement.name}{requirement.specifier}")
    return problems


def _conflict_check(_context: CheckContext) -> CheckResult:
    problems = unsloth_conflicts()
    if not problems:
        return CheckResult("ok", "no library in this environment is outside unsloth's pinned ranges")
    return CheckResult(
        "warn" if _unsloth_missing() else "fail",
        "unsloth's pins conflict with this environment (trl<=1.15, datasets<5, transformers<=5.17)",
        (*problems, "installing unsloth here would downgrade them and break backends that need the newer "
                    "versions (trl 1.16 for the trl backend, datasets>=5 for mini-trainer)"),
        fix=INSTALL, docs=DOCS,
    )


def _unsloth_missing() -> bool:
    from importlib import metadata

    try:
        metadata.version("unsloth")
    except metadata.PackageNotFoundError:
        return True
    return False


def _device_check(_context: CheckContext) -> CheckResult:
    from thub.backend import cuda_visible

    if cuda_visible():
        return CheckResult("ok", "an NVIDIA GPU is visible: unsloth's fast kernels are used")
    return CheckResult(
        "warn", "no NVIDIA GPU: unsloth falls back to CPU (stock transformers + PEFT, much slower)",
        ("supported there: text LoRA with SFTTrainer; no 4-bit/8-bit loading, no vision models",),
        fix="# run on a machine with an NVIDIA GPU for real training; or make unsloth refuse the CPU:\n"
            "export UNSLOTH_DISABLE_CPU_FALLBACK=1",
        docs=DOCS,
    )


@hookimpl
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    only = frozenset({BACKEND})
    register(CheckSpec("unsloth.conflicts", "unsloth's pinned ranges against this environment", _conflict_check,
                       backends=only))
    register(CheckSpec("unsloth.device", "unsloth on GPU or CPU", _device_check, backends=only))


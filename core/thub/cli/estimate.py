"""``thub estimate ALGO --model-path PATH``: per-GPU memory from config.json alone (never weights).

The parameter options are generated from the algorithm's parameter model exactly as for
``thub train`` (same names, ``--config``, ``THUB_*``, ``--set``), resolved by
:func:`thub.config.resolve.resolve`. See docs/estimate.md.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import click

from thub.cli.param_options import AlgorithmGroup, flag_values, option_for
from thub.config.fields import param_infos
from thub.errors import UsageError
from thub.manager import Registry, get_registry
from thub.ui.output import emit_json, stdout_console, table

# Parameters a run needs but an estimate does not; filled with a placeholder when unset.
_UNUSED_REQUIRED = ("data_path", "ckpt_output_dir")
_CONTROL = ("backend", "config", "overrides", "as_json", "gpus", "gpu_memory", "sharding", "precision")


def _estimation_registry(registry: Registry, algorithm: str, requested: str | None) -> tuple[Registry, str | None]:
    """The registry and backend to resolve with: the chosen backend (its defaults apply), or, when
    none is installed or can run here, a neutral stand-in so an estimate never needs a backend."""
    from thub.selection import choose_backend
    from thub.specs import BackendSpec

    try:
        backend, _ = choose_backend(registry, algorithm, requested)
        return registry, backend.name
    except UsageError:
        if requested:
            raise
    infos = param_infos(registry.algorithm(algorithm).load_parameters())
    neutral = BackendSpec(name="(none)", summary="algorithm defaults only", algorithms={algorithm: frozenset(infos)},
                          runner="")
    return dataclasses.replace(registry, backends={neutral.name: neutral}), neutral.name


def run_estimate(algorithm: str, *, backend: str | None = None, config_file: str | None = None,
                 flags: dict[str, Any] | None = None, overrides: list[str] | None = None,
                 gpus: int | None = None, gpu_memory: str | int = "80GiB", sharding: str = "auto",
                 precision: str = "auto", environ: dict[str, str] | None = None) -> tuple[Any, Any]:
    """Resolve the parameters like ``thub train`` would and estimate; returns (Estimate, resolved)."""
    import os

    from thub.config.resolve import resolve
    from thub.insight.architecture import load_facts
    from thub.insight.estimator import SUPPORTED, estimate, parse_size, setup_from_params

    registry = get_registry()
    registry.algorithm(algorithm)  # unknown algorithm: UsageError (exit 2)
    if algorithm not in SUPPORTED:
        raise UsageError(f"thub estimate cannot size algorithm {algorithm!r} (from a plugin); "
                         f"it sizes {', '.join(SUPPORTED)}")
    registry, backend_name = _estimation_registry(registry, algorithm, backend)
    env = dict(os.environ if environ is None else environ)
    for name in _UNUSED_REQUIRED:
        env.setdefault(f"THUB_{name.upper()}", "(unused by estimate)")
    resolved = resolve(registry, algorithm, backend=backend_name, config_file=config_file, environ=env,
                       flags=flags or {}, overrides=list(overrides or []), allow_ignored=True)
    params = resolved.values()
    if gpus is None:
        from thub.runner.batching import world_size

        gpus = world_size(params)
    if gpus < 1:
        raise UsageError("--gpus must be at least 1")
    facts = load_facts(params["model_path"])
    setup = setup_from_params(algorithm, params, gpus=gpus, gpu_memory=parse_size(gpu_memory),
                              sharding=sharding, precision=precision, policy=resolved.backend.memory, facts=facts,
                              reference_model=getattr(resolved.params, "loads_reference_model", None))
    return estimate(facts, setup), resolved


def render(result: Any, resolved: Any, seconds: float) -> None:
    """The human report on stderr: setup, breakdown, low/expected/high, verdict, advice."""
    from thub.insight.estimator import format_bytes

    out, facts, setup = stdout_console(), result.facts, result.setup  # the estimate is a report: stdout
    params = f"{facts.total_params / 1e9:.3g}B" if facts.total_params >= 1e8 else f"{facts.total_params:,}"
    moe = f", MoE {facts.num_experts} experts / {facts.experts_per_token} per token" if facts.num_experts else ""
    out.print(f"[bold]{setup.algorithm}[/bold] on {facts.model_type} ({params} parameters{moe}"
              f"{', tied embeddings' if facts.tied_embeddings else ''}) from {facts.source}")
    backend = resolved.backend.name
    out.print(f"{setup.gpus} GPU(s) x {format_bytes(setup.gpu_memory)}, {setup.resolved_sharding()}, "
              f"{setup.precision}, {setup.tokens_per_gpu:,} tokens per GPU, gradient checkpointing "
              f"{'on' if setup.gradient_checkpointing else 'off'}; defaults of backend {backend}")
    if setup.policy:
        out.print(f"memory policy of backend {backend}: {setup.policy}", markup=False)
    else:
        out.print("memory policy: a generic training loop as the parameters say (the backend declares none)")
    rows = [[c.name, format_bytes(c.bytes), c.phase, c.note] for c in result.components]
    table(None, ["component", "per GPU", "phase", "note"], rows)
    out.print(f"\nper GPU: low {format_bytes(result.low)} · [bold]expected {format_bytes(result.expected)}[/bold]"
              f" · high {format_bytes(result.high)}   (trainable {result.trainable_params:,} params)")
    colour = {"fits": "green", "tight": "yellow", "unlikely": "red", "does not fit": "red"}[result.verdict]
    room = (f"headroom {format_bytes(result.headroom)}" if result.headroom >= 0
            else f"short by {format_bytes(-result.headroom)}")
    out.print(f"[{colour}]{result.verdict}[/{colour}] in {format_bytes(setup.gpu_memory)}: {room}")
    for line in result.advice:
        out.print(f"  - {line}")
    for note in setup.assumptions:
        out.print(f"[dim]assumed: {note}[/dim]")
    out.print(f"[dim]read config.json only, no weights ({seconds * 1000:.0f} ms)[/dim]")


def _make_command(algorithm: str) -> click.Command:
    spec = get_registry().algorithm(algorithm)
    infos = param_infos(spec.load_parameters())

    def callback(**kwargs: Any) -> None:
        control = {k: kwargs.pop(k) for k in _CONTROL}
        started = time.perf_counter()
        result, resolved = run_estimate(
            algorithm, backend=control["backend"], config_file=control["config"],
            flags=flag_values(infos, kwargs), overrides=list(control["overrides"]), gpus=control["gpus"],
            gpu_memory=control["gpu_memory"], sharding=control["sharding"], precision=control["precision"])
        if control["as_json"]:
            data = result.as_dict()
            data["backend"] = resolved.backend.name
            emit_json(data)
        else:
            render(result, resolved, time.perf_counter() - started)

    from thub.insight.estimator import PRECISIONS, SHARDINGS

    params: list[click.Parameter] = [
        click.Option(["--gpus", "-g"], type=click.IntRange(min=1), default=None,
                     help="GPUs the job is spread over (default: nproc_per_node x nnodes, else 1)."),
        click.Option(["--gpu-memory"], default="80GiB", show_default=True,
                     help="Memory of one GPU: 80GiB, 141GB, 24576MiB (a bare number < 4096 is GiB)."),
        click.Option(["--sharding"], type=click.Choice(SHARDINGS), default="auto", show_default=True,
                     help="ddp (replicated), zero1/zero2 (optimizer / + gradients sharded), fsdp = zero3 "
                          "(everything sharded). auto: the backend's memory policy, else fsdp on several GPUs, "
                          "ddp for LoRA or one GPU."),
        click.Option(["--precision"], type=click.Choice(PRECISIONS), default="auto", show_default=True,
                     help="bf16-mixed: fp32 weights/grads/Adam, bf16 compute; bf16: everything bf16; fp32: no "
                          "autocast; "
                          "auto: what the backend's memory policy says, else bf16-mixed."),
        click.Option(["--backend", "-b"],
                     help="Take this backend's defaults (default: the one thub train would pick)."),
        click.Option(["--config", "-c"], type=click.Path(dir_okay=False),
                     help="YAML file of parameters (as for thub train)."),
        click.Option(["--set", "overrides"], multiple=True, metavar="KEY=VALUE", help="Override any parameter."),
        click.Option(["--json", "as_json"], is_flag=True, help="Print the estimate as JSON on stdout."),
        *(option_for(info) for info in infos.values()),
    ]
    return click.Command(
        algorithm, params=params, callback=callback,
        help=f"Memory per GPU for {algorithm}: {spec.summary}\n\nReads only the model's config.json; "
             "parameters come from the same options, --config, THUB_<NAME> and --set as thub train.",
        short_help=f"memory estimate for {algorithm}",
        context_settings={"help_option_names": ["-h", "--help"]},
    )


@click.group(cls=AlgorithmGroup, make_command=_make_command, context_settings={"help_option_names": ["-h", "--help"]})
def estimate() -> None:
    """\b
    Examples:
      thub estimate sft --model-path examples/tiny --max-seq-len 4096 --gpus 8
      thub estimate lora_sft --model-path ~/models/llama-8b --load-in-4bit --gpu-memory 24GiB
      thub estimate sft --config examples/configs/sft.yaml --json

    Docs: docs/estimate.md
    """

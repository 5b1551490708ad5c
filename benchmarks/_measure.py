"""Shared measurement helpers for the benchmarks: wall time and peak RSS of a command, and the
same tiny TRL SFT run as a bare TRL script and as a `thub train` command."""

from __future__ import annotations

import os
import statistics
import subprocess
import textwrap
import time


def run_once(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB over the process and the descendants it waited for)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{command} exited with {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_maxrss / 1024


def median_of(command: list[str], repeats: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Median wall time and median peak RSS of ``repeats`` runs (after one warm-up)."""
    run_once(command, env)
    samples = [run_once(command, env) for _ in range(repeats)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


# A bare TRL script of the SFT run below; argv: model_path data_path out steps. Ends with `trainer` built.
BARE_TRL_SFT = textwrap.dedent("""
    import json, sys
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer
    model_path, data_path, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rows = [json.loads(line) for line in open(data_path)]
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    config = SFTConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=8, learning_rate=5e-3,
                       max_length=128, assistant_only_loss=True, use_cpu=True, bf16=False, logging_steps=1,
                       save_strategy="no", report_to=["none"], disable_tqdm=True, gradient_checkpointing=False)
    trainer = SFTTrainer(model=model, args=config, processing_class=tokenizer,
                         train_dataset=Dataset.from_list([{"messages": r["messages"]} for r in rows]))
""")


def thub_trl_sft(model: str, data: str, out: str, steps: int) -> list[str]:
    """`thub train` arguments of the same run as ``BARE_TRL_SFT`` (to follow ``[python, "-m", "thub"]``)."""
    return ["train", "sft", "--backend", "trl", "--model-path", model, "--data-path", data,
            "--ckpt-output-dir", out, "--max-steps", str(steps), "--effective-batch-size", "8",
            "--learning-rate", "5e-3", "--max-seq-len", "128", "--no-save-final-checkpoint",
            "--no-gradient-checkpointing"]  # as the bare script (TRL's default is on)


def phase_probe(patches: dict[str, list[tuple[str, str, str]]]) -> str:
    """The text of a ``sitecustomize.py`` that stamps wall-clock phases of a process into
    ``$THUB_PHASE_LOG`` (one JSON line per stamp: pid, phase, time, argv): the interpreter's start,
    then ``label:start``/``label:end`` around each patched callable. ``patches``: module name ->
    ``(object, attribute, label)``, ``object`` a dotted path inside the module ("" for the module
    itself); a module is patched right after it is imported (a meta-path finder that defers to the rest),
    so the probe changes nothing but the stamps. Inactive without ``$THUB_PHASE_LOG``."""
    return textwrap.dedent('''
        """Benchmark probe: wall-clock stamps of this process's phases, appended to $THUB_PHASE_LOG."""
        import json, os, sys, time

        _LOG = os.environ.get("THUB_PHASE_LOG")
        _T0 = time.time()
        _PATCHES = %r

        def stamp(name, at=None):
            with open(_LOG, "a") as handle:
                handle.write(json.dumps({"pid": os.getpid(), "phase": name, "t": time.time() if at is None else at,
                                         "argv": sys.argv[:3]}) + "\\n")

        def _wrap(owner, attribute, label):
            original = getattr(owner, attribute)

            def wrapped(*args, **kwargs):
                stamp(label + ":start")
                try:
                    return original(*args, **kwargs)
                finally:
                    stamp(label + ":end")

            setattr(owner, attribute, wrapped)

        class _After:
            def find_spec(self, name, path=None, target=None):
                if name not in _PATCHES:
                    return None
                sys.meta_path.remove(self)
                try:
                    import importlib.util
                    spec = importlib.util.find_spec(name)
                finally:
                    sys.meta_path.insert(0, self)
                if spec is None or spec.loader is None:
                    return spec
                exec_module = spec.loader.exec_module

                def patched(module, exec_module=exec_module):
                    exec_module(module)
                    for owner, attribute, label in _PATCHES[name]:
                        target = module
                        for part in filter(None, owner.split(".")):
                            target = getattr(target, part)
                        _wrap(target, attribute, label)

                spec.loader.exec_module = patched
                return spec

        if _LOG:
            stamp("interpreter", _T0)
            sys.meta_path.insert(0, _After())
    ''') % (patches,)

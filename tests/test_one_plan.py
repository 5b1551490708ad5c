"""One plan for every dry run (issue 26 item 2): ``thub train ... --dry-run --json``, the same with
``--launcher slurm`` (it only renders the batch script: no SLURM daemon) and ``thub.dry_run()``
give the same plan and the same refusals, because one function builds it (``thub.launch.plan``)
and the real run uses it too."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from thub.errors import UsageError

DATA = Path(__file__).parents[1] / "examples" / "data"
TINY = Path(__file__).parents[1] / "examples" / "tiny"
SURFACES = ("cli", "slurm", "api")
#: the real runs refuse what their dry runs refuse, before anything starts (the same plan)
RUNS = ("cli run", "slurm submit", "api run")


def _flags(params: dict[str, Any]) -> list[str]:
    flags = []
    for name, value in params.items():
        flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


def _outcome(thub_cli: Callable[..., Any], surface: str, algorithm: str, backend: str,
             params: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(the plan or result, None) or (None, the refusal's message) of one dry run or run."""
    if surface.startswith("api"):
        import thub

        try:
            call = thub.train if surface == "api run" else thub.dry_run
            return call(algorithm, backend=backend, **params), None
        except UsageError as refused:
            return None, str(refused)
    launcher = ["--launcher", "slurm"] if surface.startswith("slurm") else []
    dry = [] if surface in RUNS else ["--dry-run"]
    result = thub_cli("train", algorithm, "--backend", backend, *_flags(params), *launcher, *dry, "--json")
    if result.exit_code == 0:
        return json.loads(result.stdout), None
    assert result.exit_code == 2, (surface, result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.stderr
    return None, result.stderr.strip().removeprefix("Error: ")


def _same_words(text: str) -> str:
    """A message in one vocabulary: a value's source (``flag --max-steps`` / ``api max_steps``) and
    a control option (``--allow-ignored`` / ``allow_ignored=True``) are spelled as the caller types
    them (thub.surface); the rest must be the same word for word."""
    text = re.sub(r"\bflag --([a-z0-9-]+)", lambda m: "given " + m[1].replace("-", "_"), text)
    text = re.sub(r"\bapi (\w+)", r"given \1", text)
    text = re.sub(r"--([a-z0-9-]+)(?: ([A-Z]+)\b)?",
                  lambda m: f"<{m[1].replace('-', '_')}{' ' + m[2] if m[2] else ''}>", text)
    text = re.sub(r"\b(\w+)=\"([A-Z]+)\"", r"<\1 \2>", text)
    return re.sub(r"\b(\w+)=True\b", r"<\1>", text)


def _shared(plan: dict[str, Any]) -> dict[str, Any]:
    """The parts every launcher's plan has (the SLURM one adds ``launch``), sources in one vocabulary."""
    shared = {key: value for key, value in plan.items() if key != "launch"}
    shared["parameters"] = {name: {"value": entry["value"], "source": _same_words(entry["source"])}
                            for name, entry in plan["parameters"].items()}
    return json.loads(_same_words(json.dumps(shared)))


def _bad_rows(tmp_path: Path) -> Path:
    path = tmp_path / "bad.jsonl"
    good = (DATA / "chat.jsonl").read_text().splitlines()[0]
    path.write_text(good + "\n" + json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}) + "\n")
    return path


def _tool_call_pair(tmp_path: Path) -> Path:
    """A dpo pair whose prompt holds a tool result: valid preference data (trl trains it), which
    LLaMA-Factory's sharegpt ranking format cannot hold (its converter would skip the row)."""
    path = tmp_path / "tools.jsonl"
    prompt = [{"role": "user", "content": "what is 6 x 7?"}, {"role": "tool", "content": "42"},
              {"role": "user", "content": "so?"}]
    path.write_text(json.dumps({"prompt": prompt, "chosen": [{"role": "assistant", "content": "42"}],
                                "rejected": [{"role": "assistant", "content": "41"}]}) + "\n")
    return path


#: case -> (algorithm, the parameters that differ from a valid trl sft run, what the refusal names)
CASES: dict[str, tuple[str, Callable[[Path], dict[str, Any]], str | None]] = {
    "valid": ("sft", lambda tmp: {}, None),
    "missing data file": ("sft", lambda tmp: {"data_path": str(tmp / "missing.jsonl")}, "missing.jsonl"),
    "bad row": ("sft", lambda tmp: {"data_path": str(_bad_rows(tmp))}, "bad.jsonl:2"),
    "not honoured": ("sft", lambda tmp: {"max_tokens_per_gpu": 1024}, "max_tokens_per_gpu"),
    # the backend's translation refuses it: the real run too, before the run directory exists
    "batch that does not split": ("sft", lambda tmp: {"effective_batch_size": 5}, "nearest valid values: 4, 6"),
    "kind the algorithm does not accept": ("sft", lambda tmp: {"data_path": str(DATA / "grpo.jsonl")},
                                           "grpo.jsonl:1"),
    # the backend's row check (BackendSpec.check_rows): rows its library's format cannot hold
    # (a local model: the preference gate loads its tokenizer, and model "m" is no local folder)
    "row the backend cannot hold": ("dpo", lambda tmp: {"data_path": str(_tool_call_pair(tmp)),
                                                        "model_path": str(TINY)},
                                    "tools.jsonl:1.prompt[1]: a tool call or tool result"),
}
#: the cases on another backend than trl (registered here; its library need not be installed)
BACKENDS = {"row the backend cannot hold": "llamafactory"}


@pytest.mark.needs_backend("trl")
@pytest.mark.parametrize("case", list(CASES))
def test_every_dry_run_gives_the_same_plan_and_the_same_refusal(thub_cli, tmp_path: Path, case: str) -> None:
    algorithm, change, named = CASES[case]
    backend = BACKENDS.get(case, "trl")
    out = tmp_path / "run"
    params = {"model_path": "m", "data_path": str(DATA / "chat.jsonl"), "ckpt_output_dir": str(out),
              # nnodes given: else --launcher slurm takes it from the cluster profile (source "cluster local")
              "max_steps": 3, "learning_rate": 1e-4, "nproc_per_node": 2, "nnodes": 1,
              "tensorboard_log_dir": str(tmp_path / "tb"), **change(tmp_path)}
    if named is None:
        outcomes = {surface: _outcome(thub_cli, surface, algorithm, "trl", params) for surface in SURFACES}
        plans = {surface: plan for surface, (plan, refused) in outcomes.items() if not refused}
        assert set(plans) == set(SURFACES), outcomes
        for surface, plan in plans.items():  # what the issue found missing: trackers on SLURM
            assert {"parameters", "translation", "trackers", "torchrun", "ignored"} <= set(plan), surface
        assert _shared(plans["cli"]) == _shared(plans["api"])
        assert _shared(plans["slurm"]) == _shared(plans["api"])
        assert plans["slurm"]["launch"]["script"] == (out / "slurm" / "job.sbatch").read_text()
        return
    refusals = {surface: _outcome(thub_cli, surface, algorithm, backend, params)[1] for surface in SURFACES + RUNS}
    assert all(refusals.values()), f"{case}: not refused by {[s for s, r in refusals.items() if not r]}"
    assert named in refusals["api"]
    for surface, refused in refusals.items():
        assert _same_words(refused or "") == _same_words(refusals["api"]), surface
    assert not out.exists(), f"{case}: a refused dry run left {sorted(p.name for p in out.iterdir())}"

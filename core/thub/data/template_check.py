"""After a run: does every saved checkpoint render conversations like the input model?

OpenThoughts lost a whole evaluation this way: axolotl saved a stripped ``tokenizer_config.json``
and a 4-line ``chat_template.jinja`` without tool-call support; vLLM then dropped ``tool_calls``,
SWE-bench scored 0 % and training had looked healthy. So after every run thub renders one
conversation with tool calls (and tool definitions) with the input model's chat template and
with each checkpoint's, reading the template files only (no transformers import), and compares
the text. A difference is a warning in the run summary and in ``result.json``
(``template_check``, ``warnings``); ``thub doctor --output-dir RUN`` reports it again.

Checkpoints without tokenizer files (an adapter-only folder is served with the base tokenizer)
are listed as not checked, never as a mismatch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: A conversation with everything a serving stack needs the template for: system prompt, tool
#: definitions, an assistant tool call, the tool's answer and a final reply.
SAMPLE_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"sunny\"}"},
    {"role": "assistant", "content": "It is sunny and 21 degrees in Paris."},
]
SAMPLE_TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

def load_template(folder: Path) -> tuple[str | None, dict[str, Any]]:
    """The chat template saved in ``folder`` that renders the tool-call sample (the ``tool_use``
    one of named templates, else ``default``, as ``apply_chat_template(tools=...)`` picks) and its
    special tokens, read by :mod:`thub.data.saved_template`; an unreadable file reads as none."""
    from thub.data.saved_template import pick_template, read_chat_template, read_special_tokens

    try:
        special = read_special_tokens(folder)
    except (OSError, ValueError):
        special = {}
    try:
        return pick_template(read_chat_template(folder), tools=True), special
    except (OSError, ValueError):
        return None, special


def render(source: str, special: dict[str, str]) -> str:
    """``SAMPLE_MESSAGES`` with ``SAMPLE_TOOLS`` rendered like ``apply_chat_template(tokenize=False)``."""
    from thub.data.templates import compile_template

    return compile_template(source).render(messages=SAMPLE_MESSAGES, tools=SAMPLE_TOOLS, documents=None,
                                   add_generation_prompt=False, **special)


def _first_difference(expected: str, found: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(expected, found)) if a != b), min(len(expected), len(found)))
    return (f"renders differently from character {at}: expected {expected[at:at + 40]!r}, "
            f"found {found[at:at + 40]!r}")


def check_checkpoints(model_path: str, checkpoints: list[str]) -> dict[str, Any]:
    """Compare each checkpoint's rendered chat template with ``model_path``'s on the sample.

    Returns ``{"sample", "reference", "checked", "not_checked", "mismatches": [{"checkpoint",
    "problem"}]}``; ``reference`` says why nothing could be compared when the input model is not
    a local folder with a chat template (a hub id, or no template).
    """
    from thub.data.saved_template import has_tokenizer_files

    report: dict[str, Any] = {"sample": "system, tool definitions, an assistant tool call, a tool reply",
                              "reference": str(model_path), "checked": [], "not_checked": [], "mismatches": []}
    folder = Path(model_path).expanduser()
    if not folder.is_dir():
        report["reference"] = f"{model_path} is not a local folder: nothing to compare with"
        return report
    source, special = load_template(folder)
    if source is None:
        report["reference"] = f"{model_path} has no chat template: nothing to compare with"
        return report
    try:
        expected = render(source, special)
    except Exception as exc:  # a template that cannot render tool calls: nothing to compare with
        report["reference"] = f"{model_path}'s chat template cannot render the tool-call sample: {exc}"
        return report
    for checkpoint in dict.fromkeys(checkpoints):
        path = Path(checkpoint)
        if not path.is_dir() or not has_tokenizer_files(path):
            report["not_checked"].append(checkpoint)
            continue
        report["checked"].append(checkpoint)
        found_source, found_special = load_template(path)
        problem: str | None
        if found_source is None:
            problem = "no chat template saved (tokenizer files without one): tool calls would be lost when served"
        else:
            try:
                found = render(found_source, {**special, **found_special})
                problem = None if found == expected else _first_difference(expected, found)
            except Exception as exc:
                problem = f"its chat template cannot render the tool-call sample: {exc}"
        if problem:
            report["mismatches"].append({"checkpoint": checkpoint, "problem": problem})
    return report


def warnings_for(report: dict[str, Any]) -> list[str]:
    """One line per mismatching checkpoint, with what to do."""
    return [f"checkpoint {m['checkpoint']}: chat template differs from the input model's: {m['problem']} "
            f"(copy the input model's tokenizer files into it before serving)" for m in report["mismatches"]]


def attach(result: dict[str, Any], model_path: str) -> list[str]:
    """Run the check on a finished run's checkpoints; add ``template_check`` and ``warnings`` to
    ``result``; return the warnings. Never raises: a check that cannot run is noted."""
    paths = [c["path"] for c in result.get("checkpoints") or [] if isinstance(c, dict) and c.get("path")]
    if result.get("final_checkpoint"):
        paths.append(result["final_checkpoint"])
    if not paths:
        return []
    try:
        report = check_checkpoints(model_path, paths)
    except Exception as exc:  # e.g. jinja2 missing in this environment
        result["template_check"] = {"error": f"{type(exc).__name__}: {exc}"}
        return []
    result["template_check"] = report
    found = warnings_for(report)
    if found:
        result["warnings"] = [*result.get("warnings", []), *found]
    return found


def doctor_check(context: Any) -> Any:
    """``core.checkpoint-templates``: the check for ``thub doctor --output-dir RUN``."""
    from thub.specs import CheckResult

    run = Path(context.output_dir or "")
    try:
        result = json.loads((run / "result.json").read_text())
        if isinstance(result, dict):  # the checkpoints where the run directory is now
            from thub.runner.runpaths import rebased

            result = rebased(run, result)
        model_path = json.loads((run / "thub_run.json").read_text())["parameters"]["model_path"]["value"]
    except (OSError, ValueError, KeyError, TypeError):
        return CheckResult("skip", f"{run} holds no finished run (result.json, thub_run.json)")
    result.pop("template_check", None)
    result.pop("warnings", None)
    found = attach(result, model_path)
    report = result.get("template_check") or {}
    if found:
        return CheckResult("warn", f"{len(found)} checkpoint(s) render chat templates unlike the input model",
                           details=tuple(found),
                           fix=f"cp {model_path}/tokenizer_config.json {model_path}/chat_template.jinja CHECKPOINT/   "
                               "# the input model's tokenizer files (those it has)")
    if not report.get("checked"):
        return CheckResult("skip", report.get("error") or f"no checkpoint with tokenizer files in {run}")
    return CheckResult("ok", f"{len(report['checked'])} checkpoint(s) render the tool-call sample like the input model")

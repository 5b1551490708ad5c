"""Local task files: a JSONL of prompts and answers becomes an lm-eval task YAML; a harness YAML is
used as it is.

A JSONL row is ``{"prompt": str, "answer": str}`` (optionally ``"system": str``) or a chat row
``{"messages": [system?, user, assistant]}`` whose last turn is the answer. Rows are checked here,
in the parent, so a bad one is ``file:line: field: expected X, found Y`` (exit 2) before any model
loads. The checked rows are written next to the generated YAML (``dataset_path: json``), so the
folder is self-contained: ``lm_eval --include_path FOLDER --tasks NAME`` reruns it by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thub.data.formats import describe
from thub.data.problems import Problems
from thub.errors import UsageError, json_problem

#: lm-eval task names are YAML keys and file stems; keep them to what every tool takes.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _row(row: Any, where: str, problems: Problems) -> dict[str, str] | None:
    """The canonical ``{"system", "prompt", "answer"}`` of one row, or None (problems recorded)."""
    if not isinstance(row, dict):
        problems.error(where, "", f"expected a JSON object with prompt and answer (or messages), found {describe(row)}",
                       kind="row")
        return None
    if "messages" in row and not ("prompt" in row or "answer" in row):
        return _chat_row(row["messages"], where, problems)
    ok = True
    for key in ("prompt", "answer"):
        if key not in row:
            problems.error(where, key, "missing; expected a string (a row is {\"prompt\": ..., \"answer\": ...} "
                                       "or {\"messages\": [...]})", kind=key)
            ok = False
        elif not _text(row[key]):
            problems.error(where, key, f"expected a string, found {describe(row[key])}", kind=key)
            ok = False
    if ok and not row["answer"].strip():
        problems.error(where, "answer", "expected a non-empty string, found empty string", kind="answer")
        ok = False
    system = row.get("system", "")
    if system is None:
        system = ""
    if not _text(system):
        problems.error(where, "system", f"expected a string, found {describe(system)}", kind="system")
        ok = False
    return {"system": system, "prompt": row["prompt"], "answer": row["answer"]} if ok else None


def _chat_row(messages: Any, where: str, problems: Problems) -> dict[str, str] | None:
    if not isinstance(messages, list):
        problems.error(where, "messages", f"expected a list of messages, found {describe(messages)}", kind="messages")
        return None
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not _text(message.get("role")) or not _text(message.get("content")):
            problems.error(where, f"messages[{i}]", "expected {\"role\": str, \"content\": str}, found "
                                                    f"{describe(message)}", kind="messages")
            return None
    roles = [m["role"] for m in messages]
    if roles not in (["user", "assistant"], ["system", "user", "assistant"]):
        # lm-eval builds one user turn per example (its chat prompt: system, user); a longer
        # conversation has no place in it, so it is refused rather than flattened silently
        problems.error(where, "messages", "expected [system?, user, assistant] (one question, the answer last), "
                                          f"found roles {', '.join(roles) or '(none)'}", kind="messages")
        return None
    answer = messages[-1]["content"]
    if not answer.strip():
        problems.error(where, f"messages[{len(messages) - 1}].content", "expected the answer, found empty string",
                       kind="messages")
        return None
    system = messages[0]["content"] if roles[0] == "system" else ""
    return {"system": system, "prompt": messages[-2]["content"], "answer": answer}


#: what a row nested deeper than Python's JSON reader goes (~1,000 levels) is told
TOO_DEEP = "nested too deeply (more levels of arrays and objects than can be read)"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The checked rows of a JSONL task file; UsageError (exit 2) with ``file:line`` problems: a line
    that is no UTF-8, no JSON or nested too deeply to read is one of them, never a traceback."""
    problems = Problems()
    rows: list[dict[str, str]] = []
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the task file ({exc.strerror or exc})") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            where = f"{path}:{number}"
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                problems.error(where, "", f"expected UTF-8 text, found invalid byte at column {exc.start + 1}",
                               kind="encoding")
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.error(where, "", f"not JSON ({json_problem(exc)})", kind="json")
                continue
            except RecursionError:
                problems.error(where, "", TOO_DEEP, kind="json")
                continue
            checked = _row(row, where, problems)
            if checked is not None:
                rows.append(checked)
    problems.raise_if_errors()
    if not rows:
        raise UsageError(f"{path}: no rows; a task file holds one {{\"prompt\": ..., \"answer\": ...}} object a line")
    return rows


def task_name(name: str) -> str:
    """The lm-eval task name of a local file named ``name``: thub_-prefixed so it never shadows a
    harness task of the same name (a local ``hellaswag.jsonl``)."""
    return "thub_" + _UNSAFE.sub("_", name)


def write_task(name: str, source: Path, folder: Path, *, mode: str, apply_chat_template: bool,
               max_gen_toks: int, cut: Callable[[str], str] | None = None) -> tuple[str, Path]:
    """Check ``source`` and write ``folder/<task>.jsonl`` and ``folder/<task>.yaml``; returns the
    lm-eval task name and the YAML path. ``cut`` (:class:`thub_plugin_lmeval.context.ContextCut`)
    keeps of each prompt and system text what the model can read, before lm-eval tokenises it."""
    import yaml

    rows = read_rows(source)
    if cut is not None:
        rows = [{**row, "system": cut(row["system"]), "prompt": cut(row["prompt"])} for row in rows]
    folder.mkdir(parents=True, exist_ok=True)
    task = task_name(name)
    data = folder / f"{task}.jsonl"
    data.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    config: dict[str, Any] = {
        "task": task,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "doc_to_text": "prompt",
        "doc_to_target": "answer",
        # the answer follows the prompt verbatim (plain text); with a chat template lm-eval drops
        # the delimiter anyway and the answer opens the assistant turn
        "target_delimiter": "",
        "metadata": {"version": 1, "source": str(source), "rows": len(rows)},
    }
    if any(row["system"] for row in rows):
        # lm-eval renders a per-example description as the system turn (plain text: prepended)
        config["description"] = "system"
    if mode == "generate":
        config["output_type"] = "generate_until"
        # greedy, stopped by the model's end-of-turn token (lm-eval adds the tokenizer's EOS) or a
        # blank line when no chat template closes the turn
        config["generation_kwargs"] = {"until": [] if apply_chat_template else ["\n\n"], "do_sample": False,
                                       "max_gen_toks": max_gen_toks}
        # leading/trailing whitespace is no mistake (a newline before the end-of-turn token)
        config["metric_list"] = [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                                  "ignore_case": False, "ignore_punctuation": False,
                                  "regexes_to_ignore": [r"^\s+", r"\s+$"]}]
    else:
        config["output_type"] = "loglikelihood"
        config["metric_list"] = [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                                 {"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False}]
    path = folder / f"{task}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return task, path

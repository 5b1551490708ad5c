"""dpo and kto rows as the strings axolotl's RL data path trains, and the row check of the plan.

For dpo and kto thub renders each row with the model's chat template: ``prompt`` with its
generation prompt, each answer as the text the template adds after it. That needs the template
to render the prompt as the start of prompt + answer; a row where it does not is an error naming
the row. :func:`check_rows` (``BackendSpec.check_rows``) refuses such a row in the parent, before
any dry run or run starts, with thub's renderer of saved templates (:class:`thub.backend.ChatTemplate`);
the runner splits the rows with the same :func:`answer_texts`, rendered by the trainer's own
tokenizer. Pure Python: imports ``thub.backend`` only (no training library).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thub.backend import UsageError

PREFERENCE = ("dpo", "kto")

#: ``render(messages, add_generation_prompt)``: the conversation as the chat template renders it
Render = Callable[[list[dict[str, Any]], bool], str]


def answer_texts(algorithm: str, rows: list[dict[str, Any]], locations: list[str],
                 render: Render) -> list[dict[str, Any]]:
    """thub's canonical dpo/kto rows as ``{"prompt", "chosen", "rejected"}`` (kto: ``{"prompt",
    "completion", "label"}``) strings: the prompt rendered with its generation prompt, each answer
    what the template adds after it. A template that does not render the prompt as the start of
    prompt + answer is an error naming the row (the answer would not be where TRL looks for it)."""
    names = ("chosen", "rejected") if algorithm == "dpo" else ("completion",)
    out = []
    for row, where in zip(rows, locations, strict=True):
        prompt = render(row["prompt"], True)
        texts: dict[str, Any] = {"prompt": prompt}
        for name in names:
            full = render(row["prompt"] + row[name], False)
            if not full.startswith(prompt):
                raise UsageError(f"{where}.{name}: the model's chat template does not render the prompt (with its "
                                 "generation prompt) as the start of prompt + answer, so the answer cannot be "
                                 "separated from it for axolotl")
            texts[name] = full[len(prompt):]
        if algorithm == "kto":
            texts["label"] = bool(row["label"])
        out.append(texts)
    return out


def check_rows(algorithm: str, rows: list[dict[str, Any]], locations: list[str], params: dict[str, Any]) -> None:
    """``BackendSpec.check_rows``: a dpo/kto row whose prompt the model's chat template does not
    render as the start of prompt + answer (or that the template refuses) raises
    :class:`~thub.backend.UsageError` naming its ``file:line``. Other algorithms' rows are thub's own
    tokens (nothing to check here). A tokenizer that cannot be loaded here (a hub id without
    network) leaves the check to the training child, which runs the same :func:`answer_texts`."""
    if algorithm not in PREFERENCE or not rows:
        return
    from thub.backend import ChatTemplate, TemplateRejected, load_tokenizer

    try:
        tokenizer = load_tokenizer(str(params["model_path"]), trust_remote_code=bool(params.get("trust_remote_code")))
    except Exception:  # noqa: BLE001 - e.g. a hub id without network: the child renders and checks the rows
        return
    template = ChatTemplate(tokenizer)  # no template at all: a UsageError that says so
    for row, where in zip(rows, locations, strict=True):
        try:
            answer_texts(algorithm, [row], [where], lambda messages, generation: template.render(
                messages, add_generation_prompt=generation)[0])
        except TemplateRejected as exc:
            raise UsageError(f"{where}: the model's chat template refuses the row: {exc}") from None

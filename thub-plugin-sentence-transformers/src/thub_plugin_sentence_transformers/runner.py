"""The sentence-transformers training loop, run inside thub's supervised child process.

Heavy imports (sentence-transformers, transformers, torch, datasets) happen here only.
"""

from __future__ import annotations

import math
import random
from itertools import combinations
from typing import Any

from thub.backend import RunContext, UsageError, load_object, metrics_callback
from thub_plugin_sentence_transformers.translate import translate

#: Training Hub's cap on the (anchor, positive) pairs built for mnrl from one label's texts
MAX_PAIRS_PER_LABEL = 10_000


def label_ids(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with integer labels: integers as they are, class names numbered in sorted order."""
    labels = [row["label"] for row in rows]
    if all(isinstance(label, int) for label in labels):
        return [dict(row) for row in rows]
    numbers = {name: i for i, name in enumerate(sorted({str(label) for label in labels}))}
    return [{"text": row["text"], "label": numbers[str(row["label"])]} for row in rows]


def pairs(rows: list[dict[str, Any]], seed: int) -> list[dict[str, str]]:
    """(anchor, positive) pairs of texts with one label, at most ``MAX_PAIRS_PER_LABEL`` a label."""
    groups: dict[Any, list[str]] = {}
    for row in rows:
        groups.setdefault(row["label"], []).append(row["text"])
    rng = random.Random(seed)
    found: list[dict[str, str]] = []
    cap = math.ceil((1 + (1 + 8 * MAX_PAIRS_PER_LABEL) ** 0.5) / 2)  # k texts give k(k-1)/2 pairs
    for texts in groups.values():
        if len(texts) > cap:
            texts = rng.sample(texts, cap)
        label_pairs = [{"anchor": a, "positive": b} for a, b in combinations(texts, 2)]
        if len(label_pairs) > MAX_PAIRS_PER_LABEL:
            label_pairs = rng.sample(label_pairs, MAX_PAIRS_PER_LABEL)
        found.extend(label_pairs)
    return found


def triplets(rows: list[dict[str, Any]], seed: int) -> tuple[list[str], list[str], list[str]]:
    """One (anchor, positive, negative) triplet per held-out row whose label has another text:
    the positive another text of its label, the negative a text of another label (seeded)."""
    rng = random.Random(seed)
    groups: dict[Any, list[str]] = {}
    for row in rows:
        groups.setdefault(row["label"], []).append(row["text"])
    anchors, positives, negatives = [], [], []
    for row in rows:
        same = [t for t in groups[row["label"]] if t != row["text"]]
        other = [t for label, texts in groups.items() if label != row["label"] for t in texts]
        if same and other:
            anchors.append(row["text"])
            positives.append(rng.choice(same))
            negatives.append(rng.choice(other))
    return anchors, positives, negatives


def _split(context: RunContext, plan: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """The training rows and the held-out ones (``validation_split`` of the rows, seeded, or the
    rows of ``validation_data_path``; none without either)."""
    from thub.backend import validation_data

    held_out = plan["held_out"]
    if held_out["split"]:
        order = list(range(len(rows)))
        random.Random(context.params["seed"]).shuffle(order)
        n = math.ceil(held_out["split"] * len(rows))
        return [rows[i] for i in sorted(order[n:])], [rows[i] for i in sorted(order[:n])]
    if held_out["path"]:
        data = validation_data(context.params)
        return rows, list(data.rows) if data is not None else []
    return rows, []


def _loss(plan: dict[str, Any], model: Any) -> Any:
    from sentence_transformers.sentence_transformer import losses

    if "custom" in plan["loss"]:
        return load_object(plan["loss"]["custom"])(model)
    from thub_plugin_sentence_transformers.params import LOSSES

    return getattr(losses, LOSSES[plan["loss"]["type"]])(model)


def run(context: RunContext) -> dict[str, Any]:
    """Train with ``SentenceTransformerTrainer`` according to ``translate``; return the outcome."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.evaluation import TripletEvaluator
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments

    params = context.params
    plan = translate(context.algorithm, params)
    train_rows, held_rows = _split(context, plan, label_ids(list(context.data().rows)))
    if plan["held_out"]["path"]:
        train_rows, held_rows = label_ids(train_rows), label_ids(held_rows)
    evaluator = None
    if plan["held_out"]["split"] or plan["held_out"]["path"]:
        anchors, positives, negatives = triplets(held_rows, params["seed"])
        if not anchors:  # before the model loads
            raise UsageError(f"the held-out set ({len(held_rows)} rows) has no triplet: it needs a label with two "
                             "texts and a second label; hold out more rows (validation_split) or another file")
        evaluator = TripletEvaluator(anchors, positives, negatives, name="held_out", write_csv=False)
    model_plan = plan["model"]
    model = SentenceTransformer(model_plan["path"], trust_remote_code=model_plan["trust_remote_code"],
                                device="cpu" if plan["args"]["use_cpu"] else None)
    if model_plan["max_seq_length"]:
        model.max_seq_length = model_plan["max_seq_length"]
    before = evaluator(model) if evaluator is not None else None
    rows: list[dict[str, Any]] = pairs(train_rows, params["seed"]) if plan["pairs"] else train_rows
    if not rows:
        raise UsageError("mnrl needs two texts of one label at least: no (anchor, positive) pair in the data")
    trainer = SentenceTransformerTrainer(
        model=model, args=SentenceTransformerTrainingArguments(**plan["args"]), train_dataset=Dataset.from_list(rows),
        loss=_loss(plan, model), callbacks=[metrics_callback(context)])
    output = trainer.train(resume_from_checkpoint=context.resume_from)
    if context.stop_requested:
        latest = context.run_dir.latest_checkpoint()
        return {"interrupted": True, "final_checkpoint": str(latest[0]) if latest else None}
    summary: dict[str, Any] = {k: v for k, v in output.metrics.items() if isinstance(v, (int, float))}
    summary["global_step"] = trainer.state.global_step
    summary["train_examples"] = len(rows)
    if evaluator is not None and before is not None:
        summary["held_out_triplet_accuracy_before"] = before[evaluator.primary_metric]
        summary["held_out_triplet_accuracy"] = evaluator(model)[evaluator.primary_metric]
        summary["held_out_triplets"] = len(evaluator.anchors)
    final = None
    if plan["save_final_checkpoint"]:
        final = str(context.run_dir.path / "final")
        model.save(final)
        context.checkpoint(final, trainer.state.global_step)
    return {"final_checkpoint": final, "summary": summary}

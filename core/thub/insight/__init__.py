"""Insight: memory estimates before a run, metric plots and run history after it.

Everything here reads plain files (``config.json``, ``training_metrics.jsonl``,
``thub_run.json``) with the standard library; matplotlib is imported only to draw an image.
"""

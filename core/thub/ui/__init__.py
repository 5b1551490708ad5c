"""Presentation: what thub prints and where (:mod:`thub.ui.output`: consoles, tables, JSON) and
the dry-run plan (:mod:`thub.ui.plan`).

Apart from :mod:`thub.cli` so that the runner, doctor and launchers print without importing the
command-line interface (tests/test_architecture.py keeps it so). Imports nothing heavy.
"""

"""The dry-run plan on screen: ``thub train ... --dry-run`` (local and ``--launcher slurm``).

Here, not in :mod:`thub.cli`, so that :mod:`thub.launch.submit` shows a plan without importing
the command-line interface (which imports the launcher: no import cycle).
"""

from __future__ import annotations

from typing import Any

from thub.config.fields import format_value
from thub.ui.output import emit_json, stdout_console, table


def show_plan(data: dict[str, Any], as_json: bool, footer: str | None = "Dry run: nothing was written.") -> None:
    """Print a dry-run plan (:meth:`thub.launch.plan.Plan.as_dict`, what ``thub.dry_run`` returns)
    as tables, or as JSON."""
    if as_json:
        emit_json(data)
        return
    out = stdout_console()  # a plan is what the user asked to see: stdout (`--dry-run | less`)
    out.print(f"[bold]{data['algorithm']}[/bold] on backend [bold]{data['backend']}[/bold] ({data['backend_reason']})")
    rows = [[name, format_value(p["value"]), p["source"]] for name, p in data["parameters"].items()]
    table(None, ["parameter", "value", "source"], rows)
    for note in data.get("training_hub_notes") or []:  # Training Hub names accepted as thub behaves
        out.print(f"training-hub name {note}", markup=False)
    if data.get("checkpoint_storage"):  # where this run's copies go (URI/<run-id>/checkpoint-N)
        storage = data["checkpoint_storage"]
        out.print(f"checkpoint_storage: checkpoints go to {storage['prefix']}/checkpoint-N; {storage['note']}",
                  markup=False, highlight=False)
    count = data["data"]["rows"]
    out.print(f"\n[bold]Data[/bold]: {count} {data['data']['kind']} row{'s' if count != 1 else ''}, validated "
              "(`thub data check`)", highlight=False)
    out.print(f"\n[bold]Backend-native configuration ({data['backend']}):[/bold]")
    if data["translation"] is None:
        out.print("(this backend provides no translation)")
    else:
        import yaml

        out.print(yaml.safe_dump(data["translation"], sort_keys=False, default_flow_style=False).rstrip(), markup=False)
    if data.get("trackers"):
        out.print("\n[bold]Experiment trackers[/bold] (docs/trackers.md):")
        table(None, ["tracker", "logged by", "where"],
              [[name, t["logged_by"], t["where"]] for name, t in data["trackers"].items()])
    if "torchrun" in data:
        out.print("\n[bold]torchrun settings[/bold] (explicit > PET_* environment > defaults):")
        table(None, ["setting", "value", "source"],
              [[k, format_value(v["value"]), v["source"]] for k, v in data["torchrun"].items()])
    if footer:
        out.print(f"\n[dim]{footer}[/dim]")

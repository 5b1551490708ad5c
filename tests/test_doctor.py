"""``thub doctor``: the runner and the CLI contract, with a fake plugin's checks (every outcome)
and against this machine. The core checks are tested in test_doctor_checks.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from thub import hookimpl
from thub.cli.main import cli
from thub.doctor import blocking, format_problems, preflight, run_checks, select_checks
from thub.doctor.render import REPORT_SCHEMA, SCHEMA_VERSION
from thub.errors import UsageError
from thub.manager import Registry, load_registry, set_registry
from thub.specs import CheckContext, CheckResult, CheckSpec


def doctor(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["doctor", *args], env=env, catch_exceptions=False)


# ---------------------------------------------------------------------------------------------
# runner


def test_crashing_check_becomes_error(fake_registry: Registry) -> None:
    (outcome,) = run_checks([fake_registry.checks["fake.crash"]])
    assert outcome.status == "error"
    assert "RuntimeError: kaboom" in outcome.result.summary
    assert outcome.result.fix and "bug in the check" in outcome.result.fix
    assert any("kaboom" in line for line in outcome.result.details)


def test_check_past_its_timeout_becomes_error() -> None:
    release, finished = threading.Event(), threading.Event()

    def hang(_: CheckContext) -> CheckResult:
        release.wait(30)  # far past the check's timeout, until the test lets it go
        finished.set()
        return CheckResult("ok", "late")

    specs = [CheckSpec("t.hang", "Hangs", hang, timeout=0.3), CheckSpec("t.ok", "ok", lambda c: CheckResult("ok", "x"))]
    try:
        hang_outcome, ok = run_checks(specs)
        assert not finished.is_set()  # run_checks returned without waiting for the hanging check
        assert hang_outcome.status == "error" and "timed out after 0.3 s" in hang_outcome.result.summary
        assert ok.status == "ok"
    finally:
        release.set()


def test_checks_run_concurrently() -> None:
    # each check waits until all six are running at once: run one after another, the barrier breaks
    barrier = threading.Barrier(6, timeout=20)

    def meet(_: CheckContext) -> CheckResult:
        barrier.wait()
        return CheckResult("ok", "met the others")

    specs = [CheckSpec(f"t.s{i}", "meet", meet, timeout=30) for i in range(6)]
    outcomes = run_checks(specs, max_workers=8)
    assert [o.id for o in outcomes] == [s.id for s in specs]  # order kept
    assert [o.status for o in outcomes] == ["ok"] * 6, [o.result.summary for o in outcomes]


def test_applies_false_is_skip_and_bad_results_are_errors() -> None:
    def bad_applies(_: CheckContext) -> bool:
        raise ValueError("nope")

    specs = [
        CheckSpec("t.na", "na", lambda c: CheckResult("ok", "x"), applies=lambda c: False),
        CheckSpec("t.badapplies", "x", lambda c: CheckResult("ok", "x"), applies=bad_applies),
        CheckSpec("t.notresult", "x", lambda c: "ok"),  # type: ignore[arg-type,return-value]
        CheckSpec("t.badstatus", "x", lambda c: CheckResult("great", "x")),  # type: ignore[arg-type]
    ]
    na, bad_applies_outcome, not_result, bad_status = run_checks(specs)
    assert na.status == "skip"
    assert bad_applies_outcome.status == "error" and "applies()" in bad_applies_outcome.result.summary
    assert not_result.status == "error" and "str" in not_result.result.summary
    assert bad_status.status == "error" and "great" in bad_status.result.summary


def test_select_checks(fake_registry: Registry) -> None:
    checks = fake_registry.checks
    assert [s.id for s in select_checks(checks, ids=["fake.ok"])] == ["fake.ok"]
    assert {s.id for s in select_checks(checks, ids=["fake.*"])} >= {"fake.ok", "fake.crash"}
    assert {s.id for s in select_checks(checks, tags=["faketag", "failtag"])} == {"fake.warn", "fake.fail"}
    by_backend = {s.id for s in select_checks(checks, backend="fakebe")}
    assert "fake.backend-only" not in by_backend and "fake.ok" in by_backend
    assert "fake.backend-only" in {s.id for s in select_checks(checks, backend="otherbe")}
    with pytest.raises(UsageError, match="did you mean 'fake.fail'"):
        select_checks(checks, ids=["fake.fial"])


def test_preflight_runs_preflight_checks_of_the_backend(fake_registry: Registry) -> None:
    outcomes = preflight("fakebe", None)
    ids = {o.id for o in outcomes}
    assert "fake.ok" in ids and "core.python" in ids
    assert "fake.backend-only" not in ids and "fake.fail" not in ids
    assert all("preflight" in o.tags for o in outcomes)
    # fakebe needs a distribution that is not installed: the requirement check blocks the run
    req = next(o for o in outcomes if o.id == "core.backend-requirements")
    assert req.status == "fail" and "thub-surely-not-installed" in (req.result.fix or "")
    assert req in blocking(outcomes)
    assert "core.backend-requirements" in format_problems(outcomes)
    assert "fake.backend-only" in {o.id for o in preflight("otherbe", None)}
    assert "fake.backend-only" not in {o.id for o in preflight(None, None)}


def test_preflight_does_not_import_torch() -> None:
    code = textwrap.dedent("""
        import sys
        from thub.doctor import preflight
        preflight("trl", None)
        print("torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------
# CLI contract


def test_doctor_on_this_machine(real_registry: Registry) -> None:
    # every real check, each given 600 s: a hang guard, so a busy machine cannot turn one into an error
    result = doctor("--json", "--timeout", "600")
    data = json.loads(result.stdout)
    jsonschema.validate(data, REPORT_SCHEMA)
    by_id = {c["id"]: c for c in data["checks"]}
    assert by_id["core.python"]["status"] == "ok"
    assert not [c for c in data["checks"] if c["status"] == "error"], data
    if shutil.which("nvidia-smi") is None:
        assert by_id["core.gpus"]["status"] == "skip" and "nvidia-smi" in by_id["core.gpus"]["summary"]
    assert all(c["fix"] for c in data["checks"] if c["status"] in ("warn", "fail"))
    assert result.exit_code == data["exit_code"] == (1 if data["summary"]["fail"] else 0)


def test_human_output_groups_summarises_and_lists_fixes(fake_registry: Registry) -> None:
    result = doctor("fake.*", "core.python")
    assert result.exit_code == 1
    err = result.stdout  # the report is what was asked for: stdout (`thub doctor > report.txt`)
    assert "core" in err and "fakeplugin" in err
    assert "✓ Python version" in err and "✗ Broken: broken" in err and "! Meh: so-so" in err
    assert "– Not here" in err
    assert "8 checks: 3 ok, 1 warning, 1 failed, 2 errors, 1 skipped" in err
    assert "Fixes" in err and "echo fix-fail" in err and "echo fix-warn" in err
    assert err.index("core") < err.index("fakeplugin")
    assert "Fixes" not in result.stderr


def test_json_schema_and_nothing_but_json_on_stdout(fake_registry: Registry) -> None:
    result = doctor("fake.*", "--json")
    data = json.loads(result.stdout)
    jsonschema.validate(data, REPORT_SCHEMA)
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["exit_code"] == result.exit_code == 1 and data["ok"] is False
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses["fake.crash"] == "error" and statuses["fake.hang"] == "error"
    assert statuses["fake.na"] == "skip"
    assert "Fixes" not in result.stdout


def test_exit_codes_and_strict(fake_registry: Registry) -> None:
    assert doctor("fake.ok").exit_code == 0
    assert doctor("fake.warn").exit_code == 0
    assert doctor("fake.warn", "--strict").exit_code == 1
    assert doctor("fake.fail").exit_code == 1
    assert doctor("fake.crash").exit_code == 1
    unknown = doctor("fake.fial")
    assert unknown.exit_code == 2 and "did you mean 'fake.fail'" in unknown.stderr
    assert doctor("--backend", "fakbe").exit_code == 2
    assert doctor("--tag", "no-such-tag").exit_code == 2


def test_list_checks(fake_registry: Registry) -> None:
    result = doctor("--list-checks")
    assert result.exit_code == 0
    for check_id in ("core.python", "core.socket-paths", "core.gpu-memory", "fake.hang"):
        assert check_id in result.stdout
    data = json.loads(doctor("--list-checks", "--json").stdout)
    ids = [c["id"] for c in data["checks"]]
    assert ids.index("core.python") < ids.index("core.torch")  # slow checks after quick ones
    assert ids.index("core.torch") < ids.index("fake.ok")  # core first
    assert {"id", "title", "plugin", "tags", "backends", "timeout"} <= set(data["checks"][0])


def test_tag_backend_and_exclude(fake_registry: Registry) -> None:
    data = json.loads(doctor("--tag", "faketag", "--json").stdout)
    assert [c["id"] for c in data["checks"]] == ["fake.warn"]
    data = json.loads(doctor("--tag", "preflight", "--backend", "otherbe", "--json").stdout)
    ids = {c["id"] for c in data["checks"]}
    assert "fake.backend-only" in ids and "core.torch" not in ids and data["backend"] == "otherbe"
    data = json.loads(doctor("--exclude-tag", "slow", "--exclude-tag", "hangtag", "--json").stdout)
    assert not any("slow" in c["tags"] for c in data["checks"])


def test_timeout_option_overrides(fake_registry: Registry) -> None:
    # fake.hang's own timeout is 0.3 s and it sleeps 30 s; --timeout 3 replaces the 0.3 (and gives
    # fake.ok 3 s, plenty on a busy machine)
    data = json.loads(doctor("fake.ok", "fake.hang", "--timeout", "3", "--json").stdout)
    assert {c["id"]: c["status"] for c in data["checks"]} == {"fake.ok": "ok", "fake.hang": "error"}
    hang = next(c for c in data["checks"] if c["id"] == "fake.hang")
    assert "timed out after 3 s" in hang["summary"], hang


def test_doctor_and_help_do_not_import_torch() -> None:
    code = textwrap.dedent("""
        import sys
        from click.testing import CliRunner
        from thub.cli.main import cli
        r = CliRunner().invoke(cli, ["doctor", "--tag", "preflight", "--json"])
        assert r.exit_code in (0, 1), r.output
        r = CliRunner().invoke(cli, ["--help"])
        assert r.exit_code == 0
        print("torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_plugin_failures_are_named(tmp_path: Path) -> None:
    class Broken:
        @hookimpl
        def thub_register_checks(self, register):  # type: ignore[no-untyped-def]
            raise RuntimeError("registration exploded")

    set_registry(load_registry(extra_plugins=[("brokenplug", Broken())]))
    try:
        result = doctor("core.plugins", "--json")
        data = json.loads(result.stdout)
        check = data["checks"][0]
        assert result.exit_code == 1 and check["status"] == "fail"
        assert "brokenplug" in check["summary"] and "THUB_DISABLE_PLUGINS=brokenplug" in check["fix"]
        assert data["plugin_failures"][0]["name"] == "brokenplug"
    finally:
        set_registry(None)

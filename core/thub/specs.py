"""The things plugins register: algorithms, backends, data kinds, rewards, evaluators, doctor checks and commands.

Specs are plain frozen dataclasses so that registering them costs nothing at start-up:
pydantic parameter models and backend runners are named by *import string* and loaded only
by the command that needs them. The plugin manager stamps each spec with the plugin,
distribution and version that registered it (its provenance).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pydantic is imported only where a parameter model is loaded
    from pydantic import BaseModel


def load_object(import_string: str) -> Any:
    """Import ``"package.module:attribute"`` (or ``"package.module"``) and return the object."""
    module_name, _, attribute = import_string.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attribute.split(".")):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Provenance:
    """Which plugin registered a spec, from which distribution and version."""

    plugin: str = "?"
    distribution: str | None = None
    version: str | None = None

    def describe(self) -> str:
        if self.distribution:
            return f"{self.plugin} ({self.distribution} {self.version})"
        return self.plugin


class Registered:
    """Mixin: the manager fills ``provenance`` through :meth:`with_provenance`."""

    provenance: Provenance

    def with_provenance(self, provenance: Provenance):  # type: ignore[no-untyped-def]
        return dataclasses.replace(self, provenance=provenance)  # type: ignore[type-var]


@dataclass(frozen=True)
class AlgorithmSpec(Registered):
    """A training algorithm such as ``sft`` or ``grpo``.

    ``parameters`` is the import string of the pydantic model holding every user-facing
    parameter; it is imported only when a command needs it.
    """

    name: str
    summary: str
    parameters: str
    #: the data kinds (:class:`DataKindSpec` names) it trains on; rows of another kind are
    #: refused before anything starts. Empty: any kind.
    data_kinds: tuple[str, ...] = ()
    provenance: Provenance = Provenance()
    #: the old keyword (format names), accepted from outside plugins: use ``data_kinds``
    data_formats: dataclasses.InitVar[tuple[str, ...] | None] = None

    def __post_init__(self, data_formats: tuple[str, ...] | None) -> None:
        if data_formats and not self.data_kinds:
            # a format name is resolved to its kind when the data is checked (thub.data.kinds)
            object.__setattr__(self, "data_kinds", tuple(data_formats))

    def load_parameters(self) -> type[BaseModel]:
        """The parameter model (a pydantic model class) named by :attr:`parameters`, with the
        parameters of the registered trackers it does not declare (:func:`thub.params.with_tracker_parameters`)."""
        from thub.params import with_tracker_parameters

        return with_tracker_parameters(load_object(self.parameters))


@dataclass(frozen=True)
class DataFormatSpec:
    """One way rows of a data kind are written in a file (``messages``, ``sharegpt``, ...).

    Attributes:
        name: the format's name (``--format NAME``, ``data_format: NAME``, ``PATH:format=NAME``).
        detect: import string of ``detect(row: dict) -> bool``: whether a row read from a file
            looks like this format (cheap: it runs on every row of an ``auto`` file).
        normalise: import string of ``normalise(row, check, source) -> dict | None``: validate
            one row and return the kind's canonical row, or report each problem with
            ``check.error(field, expected, found)`` (a :class:`thub.data.RowCheck`; the message
            becomes ``file:line: field: expected X, found Y``) and return None. ``source`` is the
            row's :class:`thub.data.DatasetSource` (its per-dataset settings: tags, columns).
        summary: what a row holds, for the "no known format" error (``instruction/output``).
        priority: detection order: formats are tried highest first, then in registration order
            (a format whose rows also match a more general one, e.g. ``messages`` plus
            ``ground_truth``, needs a higher priority than that one).
    """

    name: str
    detect: str
    normalise: str
    summary: str = ""
    priority: int = 0


@dataclass(frozen=True)
class DataKindSpec(Registered):
    """A kind of training rows (``chat``, ``document``, ...): its formats and how thub treats them.

    An algorithm names the kinds it accepts (``AlgorithmSpec.data_kinds``). One run's rows are
    all of one kind. Every callable is named by import string, imported only when data of this
    kind is read, so registering imports nothing.

    Attributes:
        name: the kind's name, recorded with the run's validated rows (``thub_data/``).
        summary: what its canonical rows hold, for messages (``prompt + ground_truth``).
        formats: its :class:`DataFormatSpec` s.
        chat_template: whether its rows are rendered with the model's chat template (a model
            without one is refused before the run, and ``thub data preview`` checks it).
        preview: import string of ``preview(row, view) -> list[dict]``: what ``thub data
            preview`` shows of one canonical row, as titled panels, each
            ``{"title": str | None, **thub.data.preview.explain(...)}`` (one panel for a chat
            row; several for a row holding several texts, e.g. chosen and rejected answers).
            ``view`` is a :class:`thub.data.preview.PreviewView` (tokenizer, template, unmask,
            max_seq_len). None: the kind has no preview.
        tokenize: import string of ``tokenize(rows, tokenizer, settings, locations, template,
            sink) -> (samples, stats)`` used by ``thub data prepare`` and ``thub data stats``;
            samples are ``(input_ids, trained ranges | None)`` pairs or ``{"input_ids",
            "labels"}`` dicts, stats a :class:`thub.data.TokenizeStats`; ``settings`` holds
            ``max_seq_len``, ``overlong`` and ``unmask``. None: rows of this kind are not
            tokenized ahead of training (backends read them as they are).
        expected: import string of ``expected(params, rows, locations, tokenizer) -> (samples,
            origin) | int | None``: the ``(input_ids, labels)`` of each example thub trains from the
            rows and the row index of each (-1: several rows), which the run compares with what
            the library built (:mod:`thub.data.expected`); an int: only how many examples
            (those the ``overlong`` policy keeps, where an example is no one masked sequence:
            a preference pair); None from the function: nothing to compare.
            ``expected=None``: the number of rows is expected (no tokenizer).
        gate: import string of ``gate(rows, locations, params) -> list[str]``: the kind's own
            checks of a run's validated (and mixed) rows, in the data gate before anything
            starts or any model loads (every dry run and run): ``params`` are the run's
            resolved values (``model_path`` for a tokenizer, ``max_seq_len``, ``overlong``);
            it raises :class:`thub.errors.UsageError` (exit 2) and returns warnings to print.
            None: nothing beyond each row's own validation.
    """

    name: str
    summary: str
    formats: tuple[DataFormatSpec, ...]
    chat_template: bool = False
    preview: str | None = None
    tokenize: str | None = None
    expected: str | None = None
    gate: str | None = None
    provenance: Provenance = Provenance()

    def format_names(self) -> tuple[str, ...]:
        return tuple(fmt.name for fmt in self.formats)


@dataclass(frozen=True)
class MemoryPolicy:
    """What a backend keeps on each GPU, as its library's code does it; ``thub estimate`` sizes
    a run with it (docs/estimate.md, "Backend memory policies"). ``None`` in a field means "as
    the run's parameters and the estimate's options say".

    Attributes:
        summary: one line naming the policy, printed by ``thub estimate``.
        checkpointing: ``always`` (the library checkpoints every decoder block whatever the
            parameters say), ``offloaded`` (checkpointed layer inputs kept in CPU memory, as
            unsloth's ``use_gradient_checkpointing="unsloth"``), ``unless-disabled`` (on unless
            ``gradient_checkpointing`` is set to false: the library's default is on), ``never``,
            or None (the ``gradient_checkpointing`` parameter decides, unset = off).
        precision: ``bf16-mixed`` (fp32 weights, gradients and AdamW states, bf16 compute),
            ``bf16`` (everything bf16), ``checkpoint`` (weights kept in the checkpoint's dtype:
            bf16 checkpoints train in pure bf16, fp32 ones in bf16-mixed), or None.
        sharding: ``ddp``, ``zero1``, ``zero2`` or ``fsdp`` (the library's default), or None.
        loss: ``fused`` (logits computed in chunks, never materialised whole), ``upcast`` (full
            logits plus an fp32 copy for the loss), or None (fused when ``use_liger`` is set).
        liger_fuses_loss: with ``loss="upcast"``, whether ``use_liger`` switches to a fused loss.
        rollout: for GRPO, ``colocated`` (an inference engine on the same GPUs holds
            ``gpu_memory_utilization`` of the memory) or ``in-process`` (generation with the
            training model: KV cache only), or None.
        source: where in the library's code these facts come from.
    """

    summary: str
    checkpointing: Literal["always", "offloaded", "unless-disabled", "never"] | None = None
    precision: Literal["bf16-mixed", "bf16", "checkpoint"] | None = None
    sharding: Literal["ddp", "zero1", "zero2", "fsdp"] | None = None
    loss: Literal["fused", "upcast"] | None = None
    liger_fuses_loss: bool = True
    rollout: Literal["colocated", "in-process"] | None = None
    source: str = ""


@dataclass(frozen=True)
class BackendSpec(Registered):
    """A training library that runs one or more algorithms.

    Attributes:
        name: backend name used with ``--backend``.
        algorithms: algorithm name -> the parameter names this backend honours for it.
            A parameter the user sets that is not listed here is an error, never a silent drop.
        runner: import string of ``run(context) -> None``, imported only in the training child.
        translate: import string of ``translate(algorithm, params) -> dict``, the function the
            runner builds its configuration with (``--dry-run`` shows it). ``None``: a
            ``thub_translate_params`` hook answers (:func:`translation_hook`); that hook stays for
            wrapping another backend's translation (``@hookimpl(wrapper=True)``).
        check_rows: import string of ``check_rows(algorithm, rows, locations, params) -> None``:
            the backend's own refusal of validated rows its library cannot hold (a format
            without tool turns, say), run in the parent right after the data gate by every dry
            run and run (:func:`thub.launch.plan.plan_for`); it raises
            :class:`thub.backend.UsageError` naming the row's ``file:line`` (``locations``).
            Pure Python importing only ``thub.backend`` (no training library); for a backend of
            a managed environment it runs in that environment's interpreter, as its
            translation does. The runner may call the same function. ``None``: no such check.
        tracker_params_alone: tracker parameters this backend uses without the parameter that
            turns their tracker on (ART: ``wandb_run_name`` is its model name, which names its
            checkpoint folder). Any other ``wandb_entity``/``wandb_run_name`` without
            ``wandb_project``, or ``mlflow_experiment_name``/``mlflow_run_name`` without
            ``mlflow_tracking_uri``, changes nothing and is an error (:func:`thub.trackers.keyless`).
        requirements: distribution specifiers (PEP 508) the runner needs, checked from metadata.
        needs_cuda: True when the backend cannot train without an NVIDIA GPU.
        priority: higher wins when no ``--backend`` is given and several can run here.
        defaults: algorithm name -> backend-specific parameter defaults.
        launcher: ``"python"`` (one child process) or ``"torchrun"`` (the runner is started by
            torchrun when ``nproc_per_node``/``nnodes`` ask for more than one process).
        python: interpreter for the child process; ``None`` means the one running thub.
        docs: the backend's documentation (its README).
        install: a copy-pasteable command (shell comments allowed) that installs the backend's
            requirements; the fix ``core.backend-requirements`` prints when one is missing for the
            selected backend. ``None``: a pip command for the missing requirements.
        memory: the backend's :class:`MemoryPolicy` for ``thub estimate``; ``None``: a generic
            training loop as the parameters describe it.
        known_differences: what ``thub compare`` may find different on this backend and why,
            quantity -> one sentence (quantities: ``examples``, ``masks``, ``samples_per_step``,
            ``learning_rate``, ``loss``, ``grad_norm``), e.g. ``{"grad_norm": "logged before
            clipping"}``; the plugin's README says the same.
    """

    name: str
    summary: str
    algorithms: Mapping[str, frozenset[str]]
    runner: str
    translate: str | None = None
    check_rows: str | None = None
    tracker_params_alone: frozenset[str] = frozenset()
    requirements: tuple[str, ...] = ()
    needs_cuda: bool = False
    priority: int = 0
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    launcher: Literal["python", "torchrun"] = "python"
    python: str | None = None
    docs: str | None = None
    install: str | None = None
    memory: MemoryPolicy | None = None
    known_differences: Mapping[str, str] = field(default_factory=dict)
    provenance: Provenance = Provenance()

    def honours(self, algorithm: str) -> frozenset[str]:
        return frozenset(self.algorithms.get(algorithm, frozenset()))

    def defaults_for(self, algorithm: str) -> dict[str, Any]:
        return dict(self.defaults.get(algorithm, {}))


@dataclass(frozen=True)
class RewardSpec(Registered):
    """A GRPO reward function, named by import string.

    The function follows TRL's signature: ``f(prompts, completions, **columns) -> list[float]``
    where ``columns`` include ``ground_truth``.
    """

    name: str
    target: str
    summary: str = ""
    provenance: Provenance = Provenance()

    def load(self) -> Callable[..., list[float]]:
        return load_object(self.target)


@dataclass(frozen=True)
class EvaluatorSpec(Registered):
    """An evaluation harness that scores a model on named or local tasks (``thub eval``).

    Attributes:
        name: evaluator name used with ``thub eval --evaluator``.
        summary: one line for ``thub evaluators``.
        runner: import string of ``evaluate(request: thub.evaluate.EvalRequest) ->
            list[thub.evaluate.TaskScore]``, imported only when ``thub eval`` runs (it may import
            torch and the harness).
        requirements: distribution specifiers (PEP 508) the runner needs, checked from metadata.
        install: a copy-pasteable command that installs the requirements.
        task_files: file suffixes of local task files it reads (``.jsonl`` prompts/answers, a
            harness ``.yaml``); a task name that is not such a file is one of the harness's own.
        docs: the evaluator's documentation (its README).
    """

    name: str
    summary: str
    runner: str
    requirements: tuple[str, ...] = ()
    install: str | None = None
    task_files: tuple[str, ...] = (".jsonl",)
    docs: str | None = None
    provenance: Provenance = Provenance()


@dataclass(frozen=True)
class TrackerSpec(Registered):
    """An experiment tracker (TensorBoard, MLflow, W&B, ...): the parameter that turns it on, its
    package, and how a run reaches it by either route (:mod:`thub.trackers`): ``thub`` (thub logs
    the metrics stream from the parent process) or ``library`` (the backend honours its parameters
    and the training library logs it). Every callable is named by import string and imported only
    when a run turns the tracker on, so registering imports nothing (its package is looked for with
    ``importlib.util.find_spec``, never imported, by the checks).

    Attributes:
        name: the tracker's name (``trackers.json``, the dry run's ``trackers``, a library's list).
        title: its name in messages (``Weights & Biases``).
        key: the parameter that turns it on (set: on).
        params: all of its parameters, ``key`` first; a backend that honours none of them gets them
            honoured by thub (the ``thub`` route), so no backend lists a new tracker's parameters.
        parameters: import string of a pydantic model holding the fields of ``params`` that thub's
            :class:`thub.params.BaseParams` does not declare (an outside tracker's own parameters):
            they are added to every algorithm's parameters (CLI flags, YAML, ``THUB_*``). None:
            they are all declared already.
        module: the import name of its package (found with ``find_spec``, where it is logged); None:
            it needs none.
        distributions: the distributions that provide ``module`` (their version in ``thub doctor``).
        install: a copy-pasteable command that installs the package (the fix of a missing one).
        writer: ``open(params, metadata, previous) -> writer`` for the ``thub`` route, in a thread of
            the parent: ``writer.log(step, metrics, wall_time)``, ``writer.close(status)``,
            ``writer.info() -> dict`` (its ``trackers.json`` entry); ``previous``: that entry of the
            run resumed (``run_id`` to continue), else None.
        where: ``where(params) -> str``: where its run goes, for the dry-run plan (secrets redacted).
        record: ``record(params) -> dict``: what thub knows of the run a library logs itself
            (its ``trackers.json`` entry before the library adds its run id). None: nothing.
        problems: ``problems(params, python, environ) -> list[thub.trackers.check.Problem]``: why a
            run with ``params`` would fail to log (an unwritable directory, a store that does not
            answer, no credentials), after its package was found; ``python``: the interpreter that
            logs it (None: thub's). ``thub train`` refuses them (exit 2), ``thub doctor`` reports them.
        prepare_launch: ``prepare_launch(params, backend) -> None``: run in the parent before the
            launch (a local store created once, under a lock); a problem raises
            :class:`thub.errors.UsageError`. None: nothing to prepare.
        annotate: ``annotate(metadata) -> dict | None``: in the library's process, after it opened
            its run (HF Trainer's ``on_train_begin``): add thub's metadata to that run and return its
            ``trackers.json`` entry (None: no run is open).
        prepare: ``prepare(context, metadata, experiment) -> (environment, entry)``: before a library
            without a hook in its process starts: environment variables that carry thub's metadata
            into the run it opens (:func:`thub.trackers.library.library_tracker_environment`).
        finish: ``finish(run_dir, entry, status) -> None``: in the parent at the run's end, for a run
            the library logged (its ``trackers.json`` entry): end what thub opened for it if the
            library did not.
        run_name_param: its run-name parameter (``wandb_run_name``): a library that takes one run
            name for all its trackers (HF Trainer's ``run_name``) is given it.
        report_to: the name HF Trainer's ``report_to`` uses for it; None: HF Trainer has no
            integration for it (thub logs it from the parent).
        trainer_environment: ``trainer_environment(params) -> dict[str, str]``: the environment
            variables HF Trainer's integration reads (project, log directory, tracking URI).
        trainer_init: ``trainer_init() -> None``: run in the training child at the Trainer's
            ``on_init_end`` (main process), before its integration opens the run.
        trainer_legacy_args: environment variable -> the ``TrainingArguments`` field older
            transformers read instead (``TENSORBOARD_LOGGING_DIR`` -> ``logging_dir``).
        trainer_order: its place in ``report_to`` (lower first, then registration order).
        summary: one line for docs and ``thub plugins``.
    """

    name: str
    title: str
    key: str
    params: tuple[str, ...]
    writer: str
    where: str
    module: str | None = None
    distributions: tuple[str, ...] = ()
    install: str = ""
    parameters: str | None = None
    record: str | None = None
    problems: str | None = None
    prepare_launch: str | None = None
    annotate: str | None = None
    prepare: str | None = None
    finish: str | None = None
    run_name_param: str | None = None
    report_to: str | None = None
    trainer_environment: str | None = None
    trainer_init: str | None = None
    trainer_legacy_args: Mapping[str, str] = field(default_factory=dict)
    trainer_order: int = 0
    summary: str = ""
    provenance: Provenance = Provenance()


@dataclass(frozen=True)
class TrackerProblem:
    """One reason a tracker would fail for a run (``TrackerSpec.problems``), and the fix: a
    copy-pasteable command or instruction."""

    tracker: str
    summary: str
    fix: str


CheckStatus = Literal["ok", "warn", "fail", "skip", "error"]


@dataclass(frozen=True)
class CheckResult:
    """What one doctor check found. ``fix`` is a copy-pasteable command or instruction."""

    status: CheckStatus
    summary: str
    details: tuple[str, ...] = ()
    fix: str | None = None
    docs: str | None = None


@dataclass(frozen=True)
class CheckContext:
    """What a check may look at: the backend and output directory a run would use, and the run's
    config file (``thub doctor --config``), if one was given."""

    backend: str | None = None
    output_dir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    config: str | None = None


@dataclass(frozen=True)
class CheckSpec(Registered):
    """A ``thub doctor`` check: data, not code paths.

    ``run`` receives a :class:`CheckContext` and returns a :class:`CheckResult`; ``applies``
    (optional) returns False when the check means nothing here (it is then reported as skip).
    A check that raises becomes an ``error`` result; it never aborts the doctor run.
    """

    id: str
    title: str
    run: Callable[[CheckContext], CheckResult]
    tags: frozenset[str] = frozenset()
    applies: Callable[[CheckContext], bool] | None = None
    backends: frozenset[str] = frozenset()
    timeout: float = 10.0
    docs: str | None = None
    provenance: Provenance = Provenance()


@dataclass(frozen=True)
class CommandSpec(Registered):
    """A ``thub`` subcommand, registered lazily: ``target`` is the import string of its click
    command (``"my_plugin.cli:hello"``), imported only when the command runs.

    ``short_help`` is the command's one definition of its summary: the line ``thub --help``
    lists (without importing the command) and the first paragraph of ``thub NAME --help``; the
    command's own docstring holds only what follows it.

    ``group``: commands of one group (a dialect's command line, say) are listed by ``thub
    --help`` on one line, ``FIRST, ...  GROUP: a, b, c``; each is hidden alone. None: its own line.
    """

    name: str
    target: str
    short_help: str
    provenance: Provenance = Provenance()
    group: str | None = None


@dataclass(frozen=True)
class StorageSpec(Registered):
    """A URI scheme thub writes models and checkpoints to: a ``thub checkpoint push --to`` target,
    the ``checkpoint_storage`` mirror, or both (``hf``, ``mlflow``, ``s3``, ``gs`` and ``file`` are
    the built-in plugin's, ``thub_builtins.storage``). Both read a URI through the one parser,
    :func:`thub.checkpoint.storage.parse_uri`: its scheme names the spec, the spec the rest.

    Registering imports nothing: the drivers are checked by name (``packages``, with
    :func:`importlib.util.find_spec`) and the code is named by import string, imported only when a
    push runs.

    Attributes:
        name: the URI scheme (``s3`` for ``s3://...``): lowercase letters, digits, ``+``, ``-``, ``.``.
        summary: one line for ``thub plugins`` and the docs.
        uri: the URI's shape, for help and error messages (``s3://BUCKET/PREFIX``).
        supports: ``push`` (a ``thub checkpoint push`` target) and/or ``mirror``
            (``checkpoint_storage``: the run's checkpoints copied there, opened with fsspec's
            ``url_to_fs``; a mirror scheme must be one fsspec knows).
        packages: modules it needs, checked with ``find_spec`` where the URI is checked (the
            mirror's parameter) or used; a missing one is an error naming
            ``python -m pip install NAME``.
        push: import string of ``push(plan, extras) -> dict`` sending a planned push (``plan``:
            :func:`thub.checkpoint.push.plan_push`'s dict, its ``_target`` the parsed
            :class:`thub.checkpoint.storage.Target`; ``extras``: file name -> bytes thub writes,
            the card, plot and manifest) and returning ``revision`` and ``url``. None: the generic
            fsspec push (:mod:`thub.checkpoint.push_fsspec`: a new or empty target, the card
            last, a push cut off halfway replaced by the next one).
        parse: import string of ``parse(uri, rest) -> Target`` for a URI of this scheme
            (``rest``: what follows ``://``), raising :class:`thub.errors.UsageError` with what is
            wrong (the caller names the URI). None: the generic fsspec location (``location``).
        location: what the generic parse expects after ``://``: ``bucket`` (``BUCKET/PREFIX``,
            non-empty) or ``path`` (an absolute path, ``file:///PATH``).
        local: the location is a path on this machine: a push writes it with the usual modes
            (a private file kept private), needs no network, and a run's post-run push to a
            folder that already holds files is refused before training.
        visibility: the target has a public/private visibility (``--public``, ``push_public``).
        check: import string of ``check(target, values) -> None``: what a run's post-run push to
            this scheme refuses before training (``values``: the run's resolved parameters; the
            mlflow scheme's tracking URI), raising UsageError. None: nothing beyond the parse and
            ``packages``.
    """

    name: str
    summary: str
    uri: str
    supports: frozenset[str] = frozenset({"push"})
    packages: tuple[str, ...] = ()
    push: str | None = None
    parse: str | None = None
    location: Literal["bucket", "path"] = "bucket"
    local: bool = False
    visibility: bool = False
    check: str | None = None
    provenance: Provenance = Provenance()

    def __post_init__(self) -> None:
        import re

        if not re.fullmatch(r"[a-z][a-z0-9+.-]*", self.name):
            raise ValueError(f"storage {self.name!r}: expected a URI scheme (lowercase letters, digits, '+', '-', "
                             "'.'; a letter first)")
        if not self.supports or not self.supports <= {"push", "mirror"}:
            raise ValueError(f"storage {self.name!r}: supports: expected push and/or mirror, found "
                             f"{sorted(self.supports)}")


@dataclass(frozen=True)
class LauncherSpec(Registered):
    """How ``thub train --launcher NAME`` starts a resolved run, and how ``thub runs`` asks about it.

    The run directory, ``thub_run.json``, ``result.json``, ``thub runs``/``thub history`` and the
    post-run chain (export, eval, push) are the core's and the same on every launcher; a launcher
    adds only where the run starts and the scheduler's view of it (docs/hooks.md). Every callable
    is named by import string and imported only when that launcher is used.

    Attributes:
        name: the ``--launcher`` value (``thub train``, ``thub checkpoint push``).
        summary: one line for ``--help``.
        submit: ``submit(resolved, options, *, dry_run, as_json, overwrite, resume, command_line,
            force_launch) -> int``:
            build the plan (:func:`thub.launch.plan.plan_for`), then show it (``dry_run``) or start
            the run; returns the exit code. ``options``: :class:`thub.launch.options.LaunchOptions`.
        plan: ``plan(resolved, options) -> (request, section, script)``: what it would submit, for
            the dry run and the submission: a request object of its own, the ``launch`` section of
            the plan and of ``thub_run.json`` (``launcher`` first; ``job_ids`` recorded on submit)
            and the rendered script or command shown verbatim. None: nothing beyond the core plan.
        status: ``status(run_dir, job_ids) -> {job_id: {"state": STATE, ...}}`` for the job ids
            its submit recorded (``launch.job_ids``); states use SLURM's names (``PENDING``,
            ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED``, ...: :data:`thub.launch.JOB_ENDED`).
            ``thub runs status`` and ``thub runs wait`` (which polls it) read it.
        cancel: ``cancel(run_dir, job_ids, dry_run) -> str``: stop the recorded jobs (restarts
            included) and return the command it ran (``dry_run``: would run); a failure raises
            :class:`~thub.errors.UsageError`.
        logs: globs under the run's ``logs/`` of the job output files ``thub runs logs`` shows
            after the training logs (``slurm-*.out``).
        options: the launcher flags of ``thub train`` it takes beyond ``--nodes`` and
            ``--gpus-per-node`` (:class:`thub.launch.options.LaunchOptions` field names:
            ``cluster``, ``cluster_file``, ``time``, ``max_restarts``); another one given is an error.
        distributed: ``distributed(options, flags, sources) -> (nnodes, nproc_per_node)``: the
            values ``--nodes``/``--gpus-per-node`` set (a layer of resolve), where the launcher
            derives them (a cluster profile); may update ``sources``. None: the flags as given.
        runs_elsewhere: the run starts on another machine: paths are made absolute before the
            plan and ``PET_*`` (this machine's worker) are not read.
        chained_steps: the post-run steps run as jobs chained after training (the plan says so).
        push_job: ``push_job(directory, to, *, public, force, run, cluster, cluster_file, after,
            time, job_dir, as_json, dry_run) -> None``: ``thub checkpoint push --launcher NAME``
            as a job of its own. None: the launcher cannot push (the local push runs here).
    """

    name: str
    summary: str
    submit: str
    plan: str | None = None
    status: str | None = None
    cancel: str | None = None
    logs: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    distributed: str | None = None
    runs_elsewhere: bool = False
    chained_steps: bool = False
    push_job: str | None = None
    provenance: Provenance = Provenance()


@dataclass(frozen=True)
class DialectSpec(Registered):
    """Another tool's parameter names, CLI and Python API, spoken by thub (Training Hub's
    ``thub.sft(...)`` and ``thub sft ...`` are the built-in one, ``thub_builtins.training_hub``).

    Registering imports nothing: every part is named by import string and imported only when a
    run uses the dialect, so a resolve with thub's own names never loads it.

    Attributes:
        name: the dialect's name (``training-hub``), shown by ``thub plugins``.
        summary: one line saying whose names these are.
        rules: import string of the object (a module) that maps the dialect's parameter names
            to thub's pydantic fields, with two functions:
            ``accepted_names(algorithm, infos) -> Iterable[str]``: the dialect's names for
            ``algorithm`` (those in ``infos``, the algorithm's own parameters, are thub's and stay
            thub's), so a config file, API keyword or ``--set`` may hold them;
            ``translate_layers(algorithm, layers, infos) -> (layers, notes)``: every precedence
            layer (``{name: (value, source)}``, lowest first) with the dialect's names renamed or
            translated into thub's (a source may say ``training-hub name X → Y``), a name it
            refuses raised as :class:`thub.errors.UsageError` naming the value's source, and
            notes for names accepted without setting anything. A name in ``infos`` is thub's (or
            another dialect's): keep it, converting only the names listed in ``converts``.
            :func:`thub.config.resolve.resolve` calls it only when a layer holds a name that is
            not thub's parameter and this dialect accepts, or a name in ``converts``.
        converts: thub's own parameter names whose values the dialect also converts (Training
            Hub: an int ``rdzv_id``, ``checkpoint_storage: pvc``, a ``loss_fn`` class), so a layer
            setting one consults the dialect too.
        api: public names on the ``thub`` package face this dialect provides -> import string
            (``{"sft": "thub_builtins.training_hub.functions:sft"}``); ``thub.NAME`` looks them up
            here on first use.
        api_run: import string of ``api_run(params, own) -> context manager`` for every
            ``thub.train``-style call of the Python API: called with the call's keywords before
            they are resolved (it removes the Python objects it handles in this process, except
            the names in ``own``, the algorithm's own parameters), entered around the run, and
            its ``finish(resolved, result) -> result`` adds the dialect's result keys. None: none.
    """

    name: str
    summary: str
    rules: str
    converts: frozenset[str] = frozenset()
    api: Mapping[str, str] = field(default_factory=dict)
    api_run: str | None = None
    provenance: Provenance = Provenance()


EventKind = Literal["started", "metrics", "checkpoint", "succeeded", "failed", "interrupted", "pushed"]
#: The kinds that end a run: the run's final ``status`` (``result.json``), one of them per run.
END_KINDS: frozenset[str] = frozenset({"succeeded", "failed", "interrupted"})


@dataclass(frozen=True)
class RunEvent:
    """A lifecycle event of a training run, fired in the parent process.

    ``data`` holds the metrics line for ``metrics``, ``{"path", "step"}`` for ``checkpoint``,
    and the ``result.json`` content for ``succeeded``/``failed``/``interrupted``
    (the run's final status). ``pushed`` is fired by ``thub checkpoint push`` after a model was
    published (data: ``to``, ``kind``, ``revision``, ``url``, ``files``, ``card``, ``card_facts``;
    ``run_dir`` is empty when the folder belongs to no thub run).
    """

    kind: EventKind
    run_dir: str
    algorithm: str
    backend: str
    data: Mapping[str, Any] = field(default_factory=dict)


def translation_hook(backend: str, translate: Callable[[str, dict[str, Any]], Any]) -> Callable[..., Any]:
    """A ``thub_translate_params`` implementation answering for one backend.

    A backend plugin whose translation is ``translate(algorithm, params)`` writes::

        thub_translate_params = translation_hook("mybackend", translate)
    """
    from thub.hookspecs import hookimpl

    mine = backend

    @hookimpl
    def thub_translate_params(algorithm: str, backend: str, params: dict[str, Any]) -> Any | None:
        return translate(algorithm, params) if backend == mine else None

    return thub_translate_params

"""The `snim-batch` command line: parse, call one core function, render, map errors to exit codes.

This is the only module that imports typer; it and `pipeline.terminal` alone print or exit.
"""

from __future__ import annotations

import copy
import errno
import inspect
import logging
import os
import re
import signal
import sys
import traceback
import typing
from collections.abc import Callable
from contextlib import suppress
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from pipeline.errors import (
    EXIT_FAILED,
    EXIT_REJECTS,
    EXIT_USAGE,
    BadRowsError,
    CommitOutcomeUnknown,
    RuleError,
    SnimError,
    Stopped,
    UsageError,
    brief_repr,
)
from pipeline.limits import (
    MAX_ALL_HEAPS,
    MAX_ALL_MOVES,
    MAX_FILES,
    MAX_HEAPS,
    MAX_MOVES_PER_SET,
    MAX_POSITIONS,
    MAX_RULE_SETS,
    MAX_SHUFFLED_ROWS,
)
from pipeline.terminal import (
    LOG_FORMAT_ENV,
    STOPPED_BY,
    ClosedStdout,
    StdoutClosed,
    configure_logging,
    configured_log_format,
    default_stop_signals,
    drop_held_stops,
    exit_status,
    heavy_imports,
    interrupt_within,
    late_stops_note,
    printable,
    progress_renderer,
    say_on_stderr,
    set_process_defaults,
    stdin_bytes,
    stdout_failed,
    stdout_lost,
    stop_signals_as_interrupts,
    stopped_message,
    stops_held,
    stops_held_until_taken,
    stops_once_committed,
    take_stops,
)

# click's, as typer raises them (typer may bring its own copy of click): found by name
_ClickError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_ClickUsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class _Commands(TyperGroup):
    """The command group. A usage error that click meets while parsing the command line (an
    unknown option, a missing value) is shown in the log format the line asks for, so that
    under `--log-format json` every line on stderr is a JSON object, this one too."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: Any = None, **extra: Any) -> Any:
        asked = _log_format_in(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except _ClickUsageError as exc:
            raise _in_log_format(exc, asked) from None
        ctx.meta[_ASKED_LOG_FORMAT] = asked
        return ctx

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _ClickUsageError as exc:
            raise _in_log_format(exc, ctx.meta.get(_ASKED_LOG_FORMAT, "text")) from None

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command, whose body begins by taking a stop kept while the line was read
        (`terminal.take_stops`), once its own options are parsed: a line that ends before
        (`grundy --help`, a refused flag) keeps its exit code. `run` takes it itself, inside
        the handling that writes its result."""
        command = super().get_command(ctx, cmd_name)
        body = getattr(command, "callback", None)
        if cmd_name != "run" and body is not None and not getattr(body, "takes_stops", False):
            def taking_stops(*args: Any, **kwargs: Any) -> Any:
                take_stops()
                return body(*args, **kwargs)

            taking_stops.takes_stops = True  # type: ignore[attr-defined]
            command.callback = taking_stops
        return command


_ASKED_LOG_FORMAT = "snim_batch.log_format"  # the command line's, in click's `Context.meta`


def _log_format_in(args: list[str]) -> str:
    """The log format a command line asks for, read before click parses it: its last
    `--log-format` (the group's or the command's), else the environment's."""
    asked = os.environ.get(LOG_FORMAT_ENV, "text")
    for at, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--log-format" and at + 1 < len(args):
            asked = args[at + 1]
        elif arg.startswith("--log-format="):
            asked = arg.partition("=")[2]
    return asked.lower()


def _in_log_format(exc: Any, log_format: str) -> Any:
    """`exc` as it is (click shows it as text), or under json a JSON error line with the
    same exit code: its message and where to find help. The help click shows for a command
    given no arguments stays help."""
    if log_format != LogFormat.json.value or type(exc).__name__ == "NoArgsIsHelpError":
        return exc

    class JsonUsageError(_ClickError):  # type: ignore[valid-type,misc]
        exit_code = exc.exit_code

        def show(self, file: Any = None) -> None:
            configure_logging(quiet=False, verbose=False, log_format=log_format)
            ctx = exc.ctx
            hint = (f"; see '{ctx.command_path} {ctx.help_option_names[0]}'"
                    if ctx is not None and ctx.help_option_names else "")
            say_on_stderr(f"error: {exc.format_message().rstrip('.')}{hint}")

    return JsonUsageError(exc.format_message())


app = typer.Typer(
    cls=_Commands,
    name="snim-batch",
    help="Decide who wins S-Nim positions in bulk: Parquet/CSV tables in, Parquet verdicts out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["--help", "-h"]},
)

DEFAULT_CONFIG = Path("config.yaml")


def _version(asked: bool) -> None:
    if asked:
        from pipeline import __version__

        _say(f"snim-batch {__version__}")
        raise typer.Exit(0)


def _choice(choices: type[Enum]):
    """A parser for an option with fixed `choices`, in any case: the Enum member, or a usage
    error listing the choices that shows the value given cut (typer's own shows it whole)."""

    def parse(value: object) -> Enum:
        if isinstance(value, choices):
            return value
        text = str(value)
        for choice in choices:
            if choice.value.casefold() == text.casefold():
                return choice
        listed = ", ".join(repr(choice.value) for choice in choices)
        raise typer.BadParameter(f"{brief_repr(text)} is not one of {listed}.")

    return parse


class LogFormat(str, Enum):
    text = "text"
    json = "json"


PROGRESS_EVERY = 10.0  # seconds between plain progress lines when stderr is not a terminal


@app.callback()
def _every_command(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, expose_value=False, callback=_version,
        help="Print the version (snim-batch X.Y.Z) and exit.")] = False,
    log_format: Annotated[LogFormat, typer.Option(
        "--log-format", envvar=LOG_FORMAT_ENV, parser=_choice(LogFormat),
        help="Log and progress lines on stderr: text (TIMESTAMP snim-batch: LEVEL: "
             "message) or json (one object per line: ts, level, message, logger, fields).")]
    = LogFormat.text,
) -> None:
    """Decide who wins S-Nim positions in bulk: Parquet/CSV tables in, Parquet verdicts out."""
    configure_logging(quiet=False, verbose=False, log_format=log_format.value)
GRUNDY_SEARCH_OPS = 10**9  # `grundy` tabulates for about a second at most (see --max-ops)
GRUNDY_MAX_UPTO = 10**6  # `grundy` prints SG(0..UPTO) on one line: a few megabytes at most
MAX_CAP = 2**32 - 1  # --cap as tables.max_table_len (limits.MAX_TABLE_LEN, without the kernels)


class Engine(str, Enum):
    polars = "polars"
    spark = "spark"


class Policy(str, Enum):
    reject = "reject"
    fail = "fail"


class Kind(str, Enum):
    subtraction = "subtraction"
    nim = "nim"
    half = "half"


class Form(str, Enum):
    wide = "wide"
    long = "long"


class Format(str, Enum):
    parquet = "parquet"
    csv = "csv"


class OutputFormat(str, Enum):
    parquet = "parquet"
    delta = "delta"


class KeyType(str, Enum):
    int = "int"
    string = "string"
    uuid = "uuid"


def _say(message: str) -> None:
    """One line of a command's answer on stdout, printable (`_answer`)."""
    _answer(printable(message))


def _answer(text: str) -> None:
    """A command's answer on stdout, as it is (JSON escapes its own); if stdout cannot take
    it (a full disk), the command fails, exit 1, with that as its error."""
    try:
        typer.echo(text)
    except OSError as exc:
        _err(stdout_failed(exc))
        raise typer.Exit(EXIT_FAILED) from None


def _said_written(message: str) -> None:
    """The line that reports what a command wrote: if stdout cannot take it, a warning, and
    the command keeps its exit code (what it wrote stands)."""
    try:
        typer.echo(printable(message))
    except OSError as exc:
        _err(stdout_lost(exc))


def _say_late_stops() -> None:
    """The note for stop signals that came once the command's output was committed."""
    late = late_stops_note()
    if late is not None:
        _err(late)


def _err(message: str) -> None:
    """One line on stderr, printable (a JSON object with --log-format json)."""
    say_on_stderr(message)


def _told(renderer: Any):
    """The `pipeline.events` callback of a command: warnings printed as they arise (also with
    --quiet), everything else to the progress `renderer` (None: nothing). A display that
    cannot be written (a terminal hung up or closed) is given up, never the command."""
    from pipeline.events import COMMITTED, WARNING

    shown = renderer

    def on_event(event: Any) -> None:
        nonlocal shown
        if event.kind == COMMITTED:
            stops_once_committed()
        elif event.kind == WARNING:
            _err(f"warning: {event.message}")
        elif shown is not None:
            try:
                shown(event)
            except OSError:
                shown = None

    return on_event


def _with_progress(call: Any, quiet: bool = False, verbose: bool = False,
                   every: float = PROGRESS_EVERY) -> Any:
    """`call(on_event)` with the command's progress shown (`terminal.progress_renderer`),
    the display closed before anything else is printed, whatever the outcome."""
    try:
        renderer = progress_renderer(quiet, verbose, every)
    except OSError:  # a terminal that is gone (hung up, closed): the command goes on unseen
        renderer = None
    try:
        return call(_told(renderer))
    finally:
        if renderer is not None:
            with suppress(OSError):  # a terminal that is gone
                renderer.close()


def _traceback(exc: BaseException) -> None:
    """The traceback (--verbose), each line printable: the exception messages carry data;
    under --log-format json, one object whose message is the whole traceback."""
    if configured_log_format() == LogFormat.json.value:
        _err("".join(traceback.format_exception(exc)).rstrip("\n"))
        return
    for chunk in traceback.format_exception(exc):
        for line in chunk.rstrip("\n").split("\n"):
            typer.echo(printable(line), err=True)


_INTERRUPT_SAID: list[bool] = []  # the interrupt was reported (see `main`)


def _say_stopped(signum: int | None) -> None:
    """The one line for a run stopped by Ctrl-C (None) or a stop signal."""
    _err(stopped_message(signum))
    _INTERRUPT_SAID.append(True)  # once it is out: a line cut short is said again by `main`


Reported = Callable[[BaseException, str, int], None]
"""reported(error, message, exit_code): a failed command's error as it was said (`_fail`)."""


def _fail(exc: BaseException, verbose: bool | None, reported: Reported | None = None
          ) -> NoReturn:
    """Map an exception to its one-line message and documented exit code (and hand both to
    `reported`, if given, before the exit). `verbose` None: the command has no --verbose."""
    exc = _landed_commit_within(exc) or _named_as_given(exc)
    if isinstance(exc, SnimError):
        _err(f"error: {exc}")
        if isinstance(exc, BadRowsError):
            for problem in exc.problems:
                _err(f"  {problem}")
            if exc.total > len(exc.problems):
                more = "" if exc.complete else "at least "
                _err(f"  ... and {more}{exc.total - len(exc.problems)} more")
        if verbose:
            _traceback(exc)
        _exit(exc.exit_code, reported, exc, str(exc))
    exc = interrupt_within(exc) or exc
    if isinstance(exc, KeyboardInterrupt):
        signum = exc.signum if isinstance(exc, Stopped) else None
        _say_stopped(signum)
        _exit(128 + (signum or signal.SIGINT), reported, exc, stopped_message(signum))
    if isinstance(exc, MemoryError):  # staging was removed on the way here
        said = SnimError("out of memory", written=False, hint=" (give the process more "
                         "memory, or the job less work at once)")
        _err(f"error: {said}")
        _exit(EXIT_FAILED, reported, exc, str(said))
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:  # one no check foresaw
        said = SnimError(f"{brief_repr(exc.filename or '', 120)}: a name in this path is too long "
                         "for the file system", path=exc.filename, written=False)
        _err(f"error: {said}")
        _exit(EXIT_FAILED, reported, exc, str(said))
    message = f"{type(exc).__name__}: {exc}"
    _err(f"internal error: {message} (nothing was written; "
         f"{'report it' if verbose is None else 'rerun with --verbose for details and report it'})")
    if verbose:
        _traceback(exc)
    _exit(EXIT_FAILED, reported, exc, message)


def _landed_commit_within(exc: BaseException) -> SnimError | None:
    """A stop that came while the error of a commit that may have landed was on its way (its
    staging being removed): that error, which says what is in place, not "nothing was
    written" (no COMMITTED event told the CLI to let stops be)."""
    interrupt = interrupt_within(exc)
    context = interrupt.__context__ if interrupt is not None else None
    seen: set[int] = set()
    while context is not None and id(context) not in seen:  # every one still being handled
        if isinstance(context, SnimError) and (context.written
                                               or isinstance(context, CommitOutcomeUnknown)):
            return context
        seen.add(id(context))
        context = context.__context__
    return None


def _exit(code: int, reported: Reported | None, exc: BaseException, message: str) -> NoReturn:
    if reported is not None:
        reported(exc, message, code)
    raise typer.Exit(code)


def _warn_unused_spark(engine: str, master: str | None, remote: str | None) -> None:
    """Say so when --spark-master or --spark-remote is given to a run of another engine,
    which ignores it (config.yaml's spark settings are not named: a file holds them for the
    runs that use Spark)."""
    given = [name for name, value in (("--spark-master", master), ("--spark-remote", remote))
             if value is not None]
    if given and engine != "spark":
        _err(f"warning: {' and '.join(given)} {'applies' if len(given) == 1 else 'apply'} "
             f"to --engine spark only; this run uses the {engine} engine, which ignores "
             f"{'it' if len(given) == 1 else 'them'}")


def _run_config(config: Path | None, rules: str | None, positions: str | None, out: str | None,
                engine: Engine | None, winning_moves: bool | None, on_bad_rows: Policy | None,
                overwrite: bool | None, spark_master: str | None,
                output_format: OutputFormat | None, spark_remote: str | None,
                max_rejected_rows: int | None = None, max_rejected_rate: float | None = None,
                memory_limit: str | int | None = None):
    """The settings of a run (`run`, `explain`): the config file's, with the options given.
    ./config.yaml is read only when neither --rules nor --positions is given."""
    from pipeline.api import settings
    from pipeline.config import memory_bytes

    if memory_limit is not None:  # named as given: the flag, or the variable that set it
        memory_limit = memory_bytes(memory_limit, _given_as("memory_limit", "--memory-limit"))
    if config is None and rules is None and positions is None and DEFAULT_CONFIG.exists():
        config = DEFAULT_CONFIG
    for name, value in (("rules", rules), ("positions", positions), ("out", out)):
        if value is not None and not value.strip():
            raise UsageError(f"--{name} is empty: give a path or URL")
    if config is None and not (rules and positions and out):
        if rules is None and positions is None:
            raise UsageError("no ./config.yaml here: pass --config FILE, or --rules, "
                             "--positions and --out")
        given = [_given_as(name, f"--{name}") for name, value in
                 (("rules", rules), ("positions", positions)) if value is not None]
        raise UsageError(f"no config file: pass --rules, --positions and --out, or --config "
                         f"FILE (./config.yaml is read only when neither --rules nor "
                         f"--positions is given, and {' and '.join(given)} "
                         f"{'is' if len(given) == 1 else 'are'})")
    return settings(config_file=config, rules=rules, positions=positions, out=out,
                    engine=engine.value if engine else None, winning_moves=winning_moves,
                    on_bad_rows=on_bad_rows.value if on_bad_rows else None,
                    overwrite=overwrite,
                    output_format=output_format.value if output_format else None,
                    spark_master=spark_master, spark_remote=spark_remote,
                    max_rejected_rows=max_rejected_rows, max_rejected_rate=max_rejected_rate,
                    memory_limit=memory_limit)


@app.command(short_help="Evaluate every position; write verdicts, rejects and a manifest.")
def run(
    config: Annotated[Path | None, typer.Option(
        envvar="SNIM_BATCH_CONFIG",
        help="Config file; relative paths in it are relative to it. Default: ./config.yaml, "
             "but only when neither --rules nor --positions is given (else none).")] = None,
    rules: Annotated[str | None, typer.Option(
        envvar="SNIM_BATCH_RULES",
        help="Rules table: a .parquet/.csv file, a directory of them, a glob, or a URL "
             "of an object store (s3://, gs://, az://). Default: the config's rules.")] = None,
    positions: Annotated[str | None, typer.Option(
        envvar="SNIM_BATCH_POSITIONS",
        help="Positions table (wide or long form): a file, a directory, a glob, or a URL "
             "of an object store. Default: the config's positions.")] = None,
    out: Annotated[str | None, typer.Option(
        envvar="SNIM_BATCH_OUT",
        help="Output directory or URL of an object store (replaced atomically; a symbolic link "
             "is followed); with --format delta, the root of the Delta tables. Default: the "
             "config's out.")] = None,
    engine: Annotated[Engine | None, typer.Option(parser=_choice(Engine),
                                                  envvar="SNIM_BATCH_ENGINE",
                                                  help="Execution engine. Default: the "
                                                  "config's engine, else polars.")] = None,
    winning_moves: Annotated[bool | None, typer.Option(
        "--winning-moves/--no-winning-moves", envvar="SNIM_BATCH_WINNING_MOVES",
        help="Add one winning move (move_heap, move_take) to every W verdict. Default: "
             "the config's winning_moves, else off.")] = None,
    on_bad_rows: Annotated[Policy | None, typer.Option(
        parser=_choice(Policy), envvar="SNIM_BATCH_ON_BAD_ROWS",
        help="reject: bad rows go to rejects.parquet, exit 3; fail: write nothing, exit 1. "
             "Default: the config's on_bad_rows, else reject.")]
    = None,
    overwrite: Annotated[bool | None, typer.Option(
        "--overwrite/--no-overwrite", envvar="SNIM_BATCH_OVERWRITE",
        help="Replace an existing snim-batch output (one whose manifest lists all it "
             "holds). Default: the config's overwrite, else off.")]
    = None,
    max_rejected_rows: Annotated[int | None, typer.Option(
        envvar="SNIM_BATCH_MAX_REJECTED_ROWS",
        help="Rejected rows (rules and positions) a run may have and still exit 0; over it, "
             "or over the rate, exit 3 (with --on-bad-rows fail: 1). Default: the config's "
             "max_rejected_rows, else none: any rejected row is over.")] = None,
    max_rejected_rate: Annotated[float | None, typer.Option(
        envvar="SNIM_BATCH_MAX_REJECTED_RATE",
        help="The same as a fraction (0..1) of the input rows read. Default: the config's "
             "max_rejected_rate, else none (only the rows' count applies).")] = None,
    spark_master: Annotated[str | None, typer.Option(
        envvar="SNIM_BATCH_SPARK_MASTER", help="Spark master URL (--engine spark).")]
    = None,
    output_format: Annotated[OutputFormat | None, typer.Option(
        "--format", parser=_choice(OutputFormat), envvar="SNIM_BATCH_FORMAT",
        help="parquet: one directory per run; delta: --out is a root of Delta tables that "
             "each run adds its night to. Default: the config's output.format, else "
             "parquet.")] = None,
    run_date: Annotated[str | None, typer.Option(
        envvar="SNIM_BATCH_RUN_DATE",
        help="The night (YYYY-MM-DD) a --format delta run replaces; default: today in UTC.")]
    = None,
    spark_remote: Annotated[str | None, typer.Option(
        envvar="SNIM_BATCH_SPARK_REMOTE",
        help="Spark Connect server, sc://HOST:PORT (--engine spark; instead of a master).")]
    = None,
    memory_limit: Annotated[str | None, typer.Option(
        envvar="SNIM_BATCH_MEMORY_LIMIT",
        help="Memory the polars engine keeps its verdicts within, e.g. 4GiB: past an eighth "
             "of it they go to scratch as sorted runs (not when all of them are expected "
             "within a quarter: Parquet, whose rows are known); the batches being read take "
             "their own, whatever the setting (explain estimates both). auto: a quarter of the "
             "memory available, at most 3GiB. Default: the config's memory_limit, else auto.")]
    = None,
    result_file: Annotated[Path | None, typer.Option(
        envvar="SNIM_BATCH_RESULT_FILE",
        help="Write the run's result as JSON to this file (docs/run-result.schema.json), "
             "whether the run succeeds, fails or is stopped; replaced whole (through a "
             "symlink: the file it points to).")] = None,
    json_result: Annotated[bool, typer.Option(
        "--json", envvar="SNIM_BATCH_JSON",
        help="Print the run's result as one JSON object on stdout (messages stay on "
             "stderr).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", envvar="SNIM_BATCH_QUIET",
                                        help="Print nothing but errors.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", envvar="SNIM_BATCH_VERBOSE",
                                          help="Show details and tracebacks.")]
    = False,
    log_format: Annotated[LogFormat | None, typer.Option(
        "--log-format", envvar=LOG_FORMAT_ENV, parser=_choice(LogFormat),
        help="Log and progress lines on stderr: text or json (one object per line). "
             "Default: text.")] = None,
    progress_every: Annotated[float, typer.Option(
        min=0, metavar="SECONDS", envvar="SNIM_BATCH_PROGRESS_EVERY",
        help="When stderr is not a terminal: a progress line every this many "
        "seconds, and at each phase's start and end once the run has taken that long "
        "(0: every phase and step at once). On a terminal, a live display instead.")]
    = PROGRESS_EVERY,
) -> None:
    """Evaluate every position; write verdicts, rejects, sg_tables, summary and a manifest.

    Inputs (Parquet or CSV files, directories or globs; docs/inputs.md): rules with columns
    rule_set_id, kind (subtraction, nim or half; empty: subtraction) and moves ("2 5 7",
    ranges as 1..4); positions with rule_set_id, position_id (optional: the row number)
    and heaps ("3 5 7", or a list), or in long form one heap per row (column heap).

    Exit codes: 0 clean, or rows rejected within the tolerance (max_rejected_rows,
    max_rejected_rate); 1 run failed (nothing written); 2 usage or config error; 3 completed, but
    more rows were rejected than the tolerance allows (see rejects.parquet).

    Every option can be set by its environment variable (SNIM_BATCH_...): a flag wins over
    its variable, a variable over the config file's key, the key over the default.
    """
    known: dict[str, str | None] = {"out": None, "config_file": None}

    def reported_to(path: Path | None) -> Reported:
        """The failed or stopped run's result, to `path` and with --json on stdout."""
        def reported(error: BaseException, message: str, code: int) -> None:
            from pipeline.results import FAILED, STOPPED, error_fields, result_document

            status = STOPPED if isinstance(error, KeyboardInterrupt) else FAILED
            document = result_document(status, code, error=error_fields(error, message),
                                       **known)
            problem = _result(document, path, json_result)
            if problem is not None:  # the exit code stays the run's
                _err(problem)

        return reported

    no_file = reported_to(None)  # the result file is the error: --json's result only
    try:
        if result_file is not None:
            result_file = _check_result_file(result_file)
    except UsageError as exc:
        _fail(exc, verbose, no_file)
    reported = reported_to(result_file)
    try:
        take_stops()  # one that came while the command line was parsed: reported as a stop
        configure_logging(quiet, verbose, log_format.value if log_format else None)
        with heavy_imports():
            import pipeline.engines.polars_engine  # noqa: F401 - the default engine's modules
            from pipeline.api import run_settings

        cfg = _run_config(config, rules, positions, out, engine, winning_moves, on_bad_rows,
                          overwrite, spark_master, output_format, spark_remote,
                          max_rejected_rows, max_rejected_rate, memory_limit)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, verbose, reported)
    try:
        if result_file is not None:
            _check_result_outside(result_file, cfg.out)
            _check_result_not_an_input(result_file, cfg)
    except UsageError as exc:
        _fail(exc, verbose, no_file)
    if result_file is not None:  # a run killed before its end leaves none, not the last one
        from pipeline.results import claim_result_file

        claim_result_file(result_file)
    try:
        known.update(out=str(cfg.out),
                     config_file=None if cfg.config_file is None else str(cfg.config_file))
        night = _run_date(run_date) if run_date is not None else None
        if known["config_file"] and not quiet:
            _err(f"config: {known['config_file']}")
        _warn_unused_spark(cfg.engine, spark_master, spark_remote)
        result = _with_progress(lambda on_event: run_settings(cfg, night, on_event), quiet,
                                verbose, progress_every)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, verbose, reported)
    _said_run(result, quiet, json_result)  # stdout gone: a warning, the exit says the run
    problem = _result(result.document(), result_file, json_result)
    _say_late_stops()  # also one that came while the result was written
    if problem is not None:  # committed, but the result is missing: exit 1 says so
        _err(f"{problem}; the run's output is committed")
        raise typer.Exit(EXIT_FAILED)
    raise typer.Exit(result.exit_code)


def _said_run(result: Any, quiet: bool, json_result: bool) -> None:
    """A committed run's summary lines (on stderr with --json, whose stdout is the result)."""
    say = _err if json_result else _said_written  # with --json, stdout holds the result
    if not quiet:
        counts = result.counts
        pos, rul = counts["positions"], counts["rules"]
        say(f"wrote {result.out}: {pos['verdicts']} verdicts (W {pos['W']}, "
            f"L {pos['L']}) from {pos['rows_read']} position rows; rejected "
            f"{pos['rows_rejected']} position rows and {rul['rows_rejected']} rule rows")
        if "run_date" in result.manifest:
            say(f"committed night {result.manifest['run_date']} as run "
                f"{result.manifest['run_id']} (runs table version "
                f"{result.manifest['table_versions']['runs']})")
        if result.tolerated:
            _err(result.tolerated)
        elif result.problems:
            _err(f"some rows were rejected (exit 3); first ones, all in "
                 f"{result.rejects}:")
            for problem in result.problems[:5]:
                _err(f"  {problem}")


_URL_AS_PATH = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/")  # `s3://b/k` as a Path makes it


def _local_only(path: Path | None, option: str) -> None:
    """An option that takes local paths only: a URL given to it (which the path type turned
    into `s3:/bkt/key`) is refused, shown without its secrets, before a directory named
    after its scheme is made or its password reaches a message."""
    if path is not None and _URL_AS_PATH.match(str(path)):
        from pipeline.io.store.locations import without_secrets

        url = without_secrets(str(path).replace(":/", "://", 1))
        raise UsageError(f"{option} {brief_repr(url)}: takes a local path, not a URL (write "
                         "it locally, then copy it to the store)")


def _replaced_whole(path: Path, shown: str, instead: str) -> Path:
    """The file a file option written whole by a rename over it (--result-file, --plot)
    replaces: a symlink's target, not the link. Refused (usage errors): a pipe, socket or
    device there, and a name that leads through /dev or a process's descriptors
    (`/dev/stdout`, whose target may be the scheduler's log file), since the rename would
    put a regular file in its place; a symlink loop."""
    if _through_a_stream(path) or (os.path.exists(path) and not os.path.isfile(path)
                                   and not os.path.isdir(path)):
        from pipeline.io.inputs.discovery import special_kind

        kind = (special_kind(path) if os.path.exists(path)
                and not os.path.isfile(path) else "a process's stream or descriptor")
        raise UsageError(f"{shown}: is {kind}, not a regular file, and the "
                         f"file is replaced whole, by a rename over it; {instead}")
    if not os.path.islink(path):
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:  # a dangling link: the file it names is made
        return Path(os.path.realpath(path))
    except OSError:
        raise UsageError(f"{shown}: is a symlink loop") from None


_STREAMS = re.compile(r"/dev/.*|/proc/[^/]+(/task/[^/]+)?/fd/.*")


def _through_a_stream(path: Path) -> bool:
    """Whether `path`, or a link it leads through, names a device or a process's descriptor
    (/dev/stdout, /proc/self/fd/1)."""
    at = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if _STREAMS.fullmatch(at):
            return True
        if not os.path.islink(at):
            return False
        at = os.path.abspath(os.path.join(os.path.dirname(at), os.readlink(at)))
    return False


def _check_plot_file(path: Path | None) -> Path | None:
    """--plot needs the plot extra and must name a local file in an existing directory: a
    usage error before any work. Returns the file to write (`_replaced_whole`)."""
    if path is None:
        _local_only(path, "--plot")
        return None
    from pipeline.plots import require_plotting

    require_plotting()
    _local_only(path, "--plot")
    shown = f"--plot {brief_repr(str(path))}"
    if path.name in ("", "..") or path.is_dir():
        raise UsageError(f"{shown}: is a directory (give the PNG file's name)")
    path = _replaced_whole(path, shown, "name a PNG file")
    if not path.absolute().parent.is_dir():
        raise UsageError(f"{shown}: its directory does not exist")
    return path


def _check_result_file(path: Path) -> Path:
    """--result-file must be a local file in an existing directory, and not inside a
    snim-batch output (whose manifest would not list it): a usage error before any work.
    Returns the file to write (`_replaced_whole`: a link's target)."""
    from pipeline.io.outputs.commit import refuse_inside_snim_output
    from pipeline.io.outputs.failures import PID_WIDTH, refuse_long_names, unwritable

    _local_only(path, "--result-file")
    shown = f"--result-file {brief_repr(str(path))}"
    def refuse_long(name: Path) -> None:  # its temporary file, as `whole.whole_file` names it
        refuse_long_names(name, "--result-file", "its temporary file .NAME.PID.tmp",
                          len("...tmp") + PID_WIDTH)

    refuse_long(path)  # as given, then the file a link leads to
    path = _replaced_whole(path, shown, "name a file (--json prints the result on stdout)")
    refuse_long(path)
    if path.is_dir():
        raise UsageError(f"{shown}: is a directory")
    if not path.absolute().parent.is_dir():
        raise UsageError(f"{shown}: its directory does not exist")
    cause = unwritable(path.absolute().parent)
    if cause is not None:  # found only after the commit, the night's output would stand unreported
        raise UsageError(f"{shown}: its directory cannot be written ({cause})")
    refuse_inside_snim_output(path, shown, "--result-file")
    return path


def _forget_refused_runs_result(args: list[str]) -> None:
    """A `run` command line the parser refused (a flag it does not know, a bad value) writes
    no result: the one an earlier run left at its --result-file (or SNIM_BATCH_RESULT_FILE)
    is removed, as the run would have removed it, where the run would have accepted that
    file (`_check_result_file`), so that a scheduler finds no result rather than an old one.
    The arguments are read as far as that needs: the parser has refused them."""
    if "run" not in args:
        return
    named = os.environ.get("SNIM_BATCH_RESULT_FILE")
    for flag, value in zip(args, [*args[1:], None]):
        if flag == "--result-file" and value is not None:
            named = value
        elif flag.startswith("--result-file="):
            named = flag.partition("=")[2]
    if not named:
        return
    try:
        path = _check_result_file(Path(named))
    except (UsageError, OSError):
        return
    from pipeline.results import forget_earlier_result

    forget_earlier_result(path)


def _check_result_outside(path: Path, out: object) -> None:
    """--result-file must not be the run's local output or inside it (however either is
    written: links followed), once the settings say where that is: its manifest would not
    list the file, and the next --overwrite would refuse to replace the output."""
    if not isinstance(out, Path):
        return
    where = Path(os.path.realpath(path.absolute().parent)) / path.name
    target = Path(os.path.realpath(out))
    if where == target or target in where.parents:
        raise UsageError(f"--result-file {brief_repr(str(path))}: is inside the output "
                         f"{out}, whose manifest would not list it (the next --overwrite "
                         "would refuse to replace it): write it beside the output")


def _check_result_not_an_input(path: Path, cfg: Any) -> None:
    """--result-file must not be a file the run reads: its config file, a rules or positions
    file (or the file a link among them points to), or a file an input directory or glob
    would take, now or the next night once the result is there. The result would replace it
    (a failed run's too), and the next night would read JSON."""
    from pipeline.errors import SnimError
    from pipeline.io.inputs.discovery import resolve_inputs, takes_by_name
    from pipeline.io.store.locations import Location

    entry = Path(os.path.realpath(path.absolute().parent)) / path.name  # what rename replaces
    named = Path(os.path.abspath(path))
    for what, spec in (("config file", cfg.config_file), ("--rules", cfg.rules),
                       ("--positions", cfg.positions)):
        if spec is None or Location.parse(str(spec), Path.cwd()).is_remote:
            continue
        reads = takes_by_name(Path(spec).absolute(), entry, named,  # `..` as the run takes it
                              directories_only=str(spec).endswith("/"))
        if not reads and what != "config file" and path.is_file() and not path.is_symlink():
            try:  # a link inside an input directory, or one a glob matches, to this file
                reads = any(Path(os.path.realpath(source)) == entry for source in
                            resolve_inputs(str(spec), what, cfg.out, cfg.storage_options)
                            if isinstance(source, Path))
            except (SnimError, OSError):  # the run says what is wrong with its inputs
                reads = False
        if reads:
            raise UsageError(f"--result-file {brief_repr(str(path))}: the run reads it ({what} "
                             f"{spec}), and the result would replace it: name another file")


def _result(document: dict[str, Any], path: Path | None, on_stdout: bool) -> str | None:
    """The run's result, to the --result-file (whole, or not at all) and with --json on
    stdout; the error line if either cannot take it."""
    from pipeline.results import result_json, write_result_file

    try:
        if path is not None:
            write_result_file(path, document)
    except OSError as exc:
        return f"error: {path}: cannot write the run result ({exc.strerror or exc})"
    if on_stdout:
        try:
            typer.echo(result_json(document))
        except OSError as exc:
            return stdout_failed(exc)
    return None


_OPTIONS_IN_MESSAGES = {  # how the settings' errors name an option -> (parameter, flag)
    "--max-rejected-rows": ("max_rejected_rows", "--max-rejected-rows"),
    "--max-rejected-rate": ("max_rejected_rate", "--max-rejected-rate"),
    "--run-date": ("run_date", "--run-date"),
    "option 'spark.remote'": ("spark_remote", "--spark-remote"),
    "option 'spark.master'": ("spark_master", "--spark-master"),
}


def _named_as_given(exc: BaseException) -> BaseException:
    """A usage error about an option's value that an environment variable gave, naming the
    variable too (`_given_as`): the scheduler's setting is what to fix, not a flag the
    command line does not have. Any other error as it is."""
    if not isinstance(exc, UsageError) or "(set by " in exc.message:
        return exc
    for prefix, (name, flag) in _OPTIONS_IN_MESSAGES.items():
        if exc.message.startswith(prefix + " "):
            given = _given_as(name, flag)
            if given == flag:
                return exc
            named = copy.copy(exc)
            named.message = given + exc.message[len(prefix):]
            named.args = (named.message,)
            return named
    return exc


def _given_as(name: str, flag: str) -> str:
    """How an option's value was given, for an error about it: its flag, and the variable
    when the value came from the environment (a scheduler's setting, not the command line)."""
    import importlib

    click_globals = importlib.import_module(  # click's, as typer has it (see _ClickError)
        _ClickError.__module__.rpartition(".")[0] + ".globals")
    ctx = click_globals.get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    envvar = next((p.envvar for p in ctx.command.params if p.name == name), None) if ctx else None
    if source is not None and source.name == "ENVIRONMENT" and isinstance(envvar, str):
        return f"{flag} (set by {envvar})"
    return flag


def _run_date(text: str):
    from datetime import date

    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    from pipeline.errors import brief_repr

    raise UsageError(f"{_given_as('run_date', '--run-date')}: expected a date YYYY-MM-DD, "
                     f"got {brief_repr(text)}")


# `explain` takes `run`'s options (their definitions, read from `run`'s signature, so that a
# change to one is a change to both), so that a run's command line can be given to it as it
# is, and adds --json; those that only shape what a run reports (--quiet, --progress-every,
# run's own --json) it takes and ignores, and --result-file it checks as the run does.
_EXPLAIN_OPTIONS = ("config", "rules", "positions", "out", "engine", "winning_moves",
                    "on_bad_rows", "overwrite", "spark_master", "output_format", "run_date",
                    "spark_remote", "max_rejected_rows", "max_rejected_rate", "memory_limit",
                    "result_file", "quiet", "log_format", "progress_every", "verbose")
_EXPLAIN_IGNORES = ("quiet", "progress_every")
_EXPLAIN_HELP = {  # the help of the options `explain` takes otherwise than `run`
    **dict.fromkeys(_EXPLAIN_IGNORES, "Taken as run takes it, and ignored: explain writes "
                                      "nothing and shows no progress."),
    "result_file": "Checked as run checks it (exit 2 where the run would refuse it before any "
                   "work), not written."}


def explain(**options: Any) -> None:
    """Show what `run` would do with the same options, reading only what is cheap: the rules
    table, Parquet footers, CSV headers (and the first 4 MiB, for an estimate of the rows).

    Prints the input files and their rows (exact from Parquet footers; estimated for large
    CSV files, and marked so), the positions form and key types, the distinct rules, the
    largest heap where the footers' statistics bound it, the SG-table work against the
    tables.* limits, an estimate of peak memory and scratch disk under the memory setting,
    the output and whether it would be replaced, and the engine. Writes nothing; takes run's
    command line as it is (--quiet and --progress-every are ignored; --result-file is checked
    as the run checks it, not written). Exit codes: 0, or those of `run` for an input,
    setting or output it refuses (1 an input it cannot read or an output it would not replace,
    2 usage or config error); a refused output is in the plan too, as the run would say it.
    """
    verbose, as_json = options.pop("verbose"), options.pop("as_json")
    run_date, log_format = options.pop("run_date"), options.pop("log_format")
    result_file = options.pop("result_file")
    for name in _EXPLAIN_IGNORES:
        options.pop(name)
    try:
        configure_logging(False, verbose, log_format.value if log_format else None)
        if result_file is not None:  # refused before any work, as the run refuses it
            result_file = _check_result_file(result_file)
        with heavy_imports():
            from pipeline.explain import plan_run

        cfg = _run_config(**options)
        if result_file is not None:
            _check_result_outside(result_file, cfg.out)
            _check_result_not_an_input(result_file, cfg)
        night = _run_date(run_date) if run_date is not None else None
        plan = plan_run(cfg, night)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, verbose)
    if as_json:
        import json

        _answer(json.dumps(plan.as_dict(), indent=2, ensure_ascii=True))
    else:
        for line in _plan_lines(plan):
            _say(line)
    if plan.output.exit_code:  # a preflight `explain && run` stops where the run would
        _err(f"error: the run would stop at its output: {plan.output.problem}")
        raise typer.Exit(plan.output.exit_code)


def _explain_signature() -> inspect.Signature:
    ran = inspect.signature(run, eval_str=True)
    shared = [_with_help(p, _EXPLAIN_HELP[name]) if name in _EXPLAIN_HELP else p
              for name, p in ran.parameters.items() if name in _EXPLAIN_OPTIONS]
    as_json = inspect.Parameter(
        "as_json", inspect.Parameter.KEYWORD_ONLY, default=False,
        annotation=Annotated[bool, typer.Option("--json", help="Print the plan as one JSON "
                                                "object (its plan_version says its form).")])
    return ran.replace(parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                                   for p in shared] + [as_json], return_annotation=None)


def _with_help(parameter: inspect.Parameter, help_text: str) -> inspect.Parameter:
    """`run`'s option as `explain` takes it: the same, with its own help."""
    kind, info = typing.get_args(parameter.annotation)
    info = copy.copy(info)
    info.help = help_text
    return parameter.replace(annotation=Annotated[kind, info])


explain.__signature__ = _explain_signature()  # type: ignore[attr-defined]
app.command(short_help="Show what `run` would do, reading only footers, headers and rules.")(
    explain)

_FILES_SHOWN = 10  # files listed by name in a plan; the rest are counted


def _plan_lines(plan: Any) -> list[str]:
    """The plan (`explain.RunPlan`) as lines for a terminal."""
    def count(n: int, what: str) -> str:
        return f"{n:,} {what}{'' if n == 1 else 's'}"

    def size(n: int) -> str:
        for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
            if n < 1024 or unit == "TiB":
                return f"{n:,} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
            n /= 1024  # type: ignore[assignment]
        return ""

    def key(kind: str) -> str:
        return "integer or text, as the values decide" if kind == "by values" else kind

    def files(listed: Any) -> list[str]:
        lines = []
        for f in listed[:_FILES_SHOWN]:
            rows = (count(f.rows, "row") if f.rows_exact
                    else f"about {count(f.rows, 'row')} (estimated from its first 4 MiB)")
            heap = f", heaps <= {f.largest_heap:,}" if (f.largest_heap or -1) >= 0 else ""
            lines.append(f"  {f.path}: {f.format}, {size(f.size)}, {rows}{heap}")
        if len(listed) > _FILES_SHOWN:
            lines.append(f"  ... and {count(len(listed) - _FILES_SHOWN, 'more file')}")
        return lines

    r, p, t, o = plan.rules, plan.positions, plan.tables, plan.output
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(r.distinct_by_kind.items()))
    lines = [f"engine: {plan.engine}",
             f"rules: {count(len(r.files), 'file')}, {count(r.rows, 'row')} "
             f"({r.rows_rejected:,} rejected): {count(r.rule_sets, 'rule set')} with "
             f"{count(r.distinct_rules, 'distinct rule')}{f' ({kinds})' if kinds else ''}; "
             f"keys {key(r.key_type)}", *files(r.files)]
    rows = count(p.rows, "row") if p.rows_exact else f"about {count(p.rows, 'row')} (estimated)"
    lines += [f"positions: {count(len(p.files), 'file')}, {rows}, {p.form} form; "
              f"rule_set_id {key(p.rule_set_id_type)}, position_id {key(p.position_id_type)}",
              *files(p.files)]
    if p.largest_heap is None:
        lines.append("largest heap: not known before the run (CSV, or Parquet without "
                     "statistics): tables grow as the heaps need, within the limits")
    elif p.largest_heap < 0:
        lines.append(f"largest heap: {p.largest_heap:,} (the Parquet statistics): every heap "
                     "is negative, so every position with a heap is rejected (out_of_range)")
    elif p.largest_heap_by_rule_set is None:
        lines.append(f"largest heap: {max(p.largest_heap, 0):,} (the Parquet statistics; the "
                     "same bound for every rule set)")
    else:
        heaps = p.largest_heap_by_rule_set.values()
        lines.append(f"largest heap: {max(p.largest_heap, 0):,} (the Parquet statistics); per "
                     "rule set from the row groups' rule_set_id ranges: "
                     f"{count(sum(h >= 0 for h in heaps), 'rule set')} with heaps, "
                     f"{sum(h < 0 for h in heaps):,} without")
    subtraction = count(len(t.rules), "subtraction table")
    at_limits = not t.bounded and any(rule.period is None for rule in t.rules)
    bounded = " (the heaps not known: at their limits)" if at_limits else ""
    lines.append(f"SG tables: {subtraction}, at most {count(t.values, 'value')} "
                 f"({size(t.value_bytes)}) and {count(t.ops, 'operation')}{bounded}"
                 + ("; built at once from the footers' bound" if t.presized else ""))
    limits = ", ".join(f"{name} {value:,}" for name, value in t.limits.items())
    lines.append(f"  limits: {limits}")
    if t.binds:
        lines.append(f"  the tables together {'pass' if t.bounded else 'may pass'} "
                     f"{' and '.join(t.binds)}: tables stop where it runs out, in the order "
                     "the data asks for them, and heaps beyond them are rejected rows")
    if t.stopped_by_own_limit:
        lines.append(f"  {count(t.stopped_by_own_limit, 'table')} would stop at a limit of "
                     "its own; heaps beyond it without a proven period are rejected rows")
    for rule in sorted(t.rules, key=lambda rule: -rule.ops)[:5]:
        stop = f", stopped by {rule.stopped_by}" if rule.stopped_by else ""
        heap = "" if rule.largest_heap is None else f", heaps <= {max(rule.largest_heap, 0):,}"
        period = ("" if rule.period is None else f", period {rule.period:,} from "
                  f"{rule.preperiod:,} (proven now)")
        lines.append(f"  {rule.moves}: {count(rule.rule_sets, 'rule set')}{heap}, at most "
                     f"{count(rule.values, 'value')}, {count(rule.ops, 'operation')}{stop}"
                     f"{period}")
    if len(t.rules) > 5:
        lines.append(f"  ... and {count(len(t.rules) - 5, 'more table')}")
    if t.probe_ops:
        lines.append(f"period probe: up to {count(t.probe_ops, 'operation')} more, proving "
                     "periods for sg_tables")
    m = plan.memory
    if m is None:
        lines.append("memory: the Spark executors' (not estimated)")
    else:
        lines.append(f"memory: about {size(m.total)} at peak, an estimate: {size(m.process)} "
                     f"the process, {size(m.batches)} batches in flight, {size(m.verdicts)} "
                     f"verdicts, {size(m.tables)} SG tables"
                     + (" at their limits (the heaps not known)" if at_limits else ""))
        scratch = (f"{size(m.scratch)} of scratch at most, then the "
                   "verdicts file (beside --out; for an object store, in the temporary "
                   "directory)")
        lines.append(f"memory setting: {size(m.limit)}; " + {
            "no": "the verdicts are held and sorted in memory",
            "yes": f"verdicts past an eighth of it go to scratch as sorted runs: {scratch}",
            "near the setting": "the verdicts are near what it holds: they may go to scratch "
                                f"as sorted runs: {scratch}"}[m.spill])
    state = {"create": "does not exist; it would be created",
             "fill": "an empty directory; it would be filled",
             "replace": "a snim-batch output; it would be replaced (--overwrite)",
             "add night": (f"Delta tables; the night {o.run_date} would replace the rows "
                           "an earlier run of that night left" if o.replaces_night else
                           f"Delta tables; the night {o.run_date} would be added"
                           if o.exists else
                           f"no Delta tables yet; they would be made, with the night "
                           f"{o.run_date}"),
             "refused": f"the run would stop here: {o.problem}"}[o.action]
    lines.append(f"output: {o.location} ({o.format}): {state}")
    lines += [f"warning: {text}" for text in plan.warnings]
    lines.append("nothing was run or written")
    return lines


@app.command()
def history(
    out_dir: Annotated[str, typer.Argument(
        metavar="OUT_DIR", help="A Delta table root (run --format delta).")],
) -> None:
    """List the runs committed to a Delta table root.

    One line per run: night, run id, the runs table's version, status, counts and W rate; a
    night's earlier runs are marked replaced (partly replaced when the later run was stopped
    between its commits), a run a failed run's restore took out, rolled back, and a run
    stopped between its commits, incomplete."""
    try:
        from pipeline.config import resolve_location
        from pipeline.history import history_lines

        lines = history_lines(resolve_location(out_dir, Path.cwd()))
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, None)
    for line in lines:
        _say(line)


def _parse_moves(text: str):
    from pipeline.transforms.lists import MAX_MOVES, parse_int_list

    try:
        return parse_int_list(text, allow_ranges=True, item="move", most=MAX_MOVES)
    except ValueError as exc:
        raise UsageError(f"--moves: {exc}") from None


@app.command(short_help="Inspect one rule set: its Grundy values, preperiod and period.")
def grundy(
    moves: Annotated[str, typer.Option(
        help='The move set S, e.g. "2 5", "2,5,12" or "1..3".')] = "",
    kind: Annotated[Kind, typer.Option(parser=_choice(Kind), help="The rule's kind.")]
    = Kind.subtraction,
    upto: Annotated[int, typer.Option(min=0, max=GRUNDY_MAX_UPTO, help="Print SG(0..UPTO).")]
    = 40,
    cap: Annotated[int, typer.Option(min=1, max=MAX_CAP,
                                     help="Longest table to search for a period.")] = 2**26,
    max_ops: Annotated[int, typer.Option(
        min=1, help="Work limit of the table, for --upto and the period search, in operations "
        "(values x (|S| + 200), about 1 ns each).")] = GRUNDY_SEARCH_OPS,
    plot: Annotated[Path | None, typer.Option(
        help="Also draw the SG sequence, preperiod and one period, to this PNG file.")] = None,
) -> None:
    """Inspect one rule set: its Grundy values, preperiod and period (proven, or not found)."""
    try:
        from pipeline.grundy import build_table, canonical_rule, counted_values

        plot = _check_plot_file(plot)
        try:
            rule = canonical_rule(kind.value, _parse_moves(moves) if moves.strip() or
                                  kind is Kind.subtraction else None)
        except RuleError as exc:
            raise UsageError(f"--moves: {exc}") from None
        limit = min(cap, rule.ops_len(max_ops))
        table = build_table(rule, upto + 1, limit, probe_ops=max_ops)
        import numpy as np

        values = table.sg(np.arange(upto + 1, dtype=np.int64))
        if plot is not None:
            from pipeline.plots import plot_sequence

            plot_sequence(table, plot, upto)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, None)
    _say(f"rule: {rule.kind} {rule.label if rule.kind == 'subtraction' else ''}".rstrip())
    if rule.kind != "subtraction":
        _say("closed form: " + ("SG(x) = x" if rule.kind == "nim" else
                                "SG(x) = x without its trailing one-bits, halved"))
    elif table.period is not None:
        _say(f"preperiod: {table.preperiod}")
        _say(f"period: {table.period}")
    else:
        _say(f"period: none found within {counted_values(table.table_len)}")
    known = values[values >= 0]
    _say(f"SG(0..{known.shape[0] - 1}): " + " ".join(str(int(v)) for v in known))
    if known.shape[0] < values.shape[0]:
        beyond = f"--cap {cap} values" if limit == cap else f"--max-ops {max_ops}"
        _say(f"SG({known.shape[0]}..{upto}): unknown (beyond {beyond}, with no period proven)")


@app.command(short_help="Solve the classic S-Nim text format on stdin: W/L per test case.")
def solve(
    cap: Annotated[int, typer.Option(min=1, max=MAX_CAP, help="Longest SG table to build.")]
    = 2**26,
    max_rule_ops: Annotated[int, typer.Option(
        min=1, help="Work limit of one rule's table, in operations (values x (|S| + 200), "
        "about 1 ns each), as tables.max_rule_ops.")] = 2_000_000_000,
    max_run_ops: Annotated[int, typer.Option(
        min=1, help="Work limit of all tables together, as tables.max_run_ops.")]
    = 10_000_000_000,
) -> None:
    """Read the classic S-Nim text format on stdin; print one line of W/L per test case.

    Input: `k s1..sk`, then `m`, then m lines `l h1..hl`; repeated; ends with `0`.
    """
    try:
        with heavy_imports():
            from pipeline.classic import solve_classic

        text = solve_classic(stdin_bytes(), cap, max_rule_ops, max_run_ops)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, None)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError) as exc:  # no stdout (`>&-`), a full disk
        _err(stdout_failed(exc))
        raise typer.Exit(EXIT_FAILED) from None


@app.command(short_help="Convert the classic S-Nim text format to Parquet tables.")
def convert(
    source: Annotated[Path, typer.Argument(
        metavar="SOURCE", help="Classic-format text file ('-' for stdin).")],
    out: Annotated[Path, typer.Option(help="Directory for rules.parquet and positions.parquet.")],
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace tables an earlier convert wrote there (nothing else).")]
    = False,
) -> None:
    """Convert the classic S-Nim text format to rules.parquet + positions.parquet (wide form).

    Both tables are written, or neither."""
    try:
        from pipeline.convert import convert_classic

        _local_only(out, "--out")
        _local_only(source, "SOURCE")
        data = stdin_bytes() if str(source) == "-" else _read_bytes(source)
        written = _with_progress(lambda on_event: convert_classic(data, out, overwrite,
                                                                  on_event))
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, None)
    _said_written(f"wrote {', '.join(str(p) for p in written)}")
    _say_late_stops()


@app.command(short_help="Render a run's outputs as one self-contained HTML page.")
def report(
    out_dir: Annotated[str, typer.Argument(
        metavar="OUT_DIR", help="A run's output directory, or a Delta table root (run "
                                "--format delta: its latest night).")],
    html_file: Annotated[Path | None, typer.Option(
        "--html", help="Where to write the page (default: OUT_DIR/report.html).")] = None,
) -> None:
    """Render a run's outputs (or a Delta root's latest night) as one self-contained HTML
    page (no network needed to view)."""
    try:
        from pipeline.report import write_report

        _local_only(html_file, "--html")
        target = _with_progress(lambda on_event: write_report(out_dir, html_file, on_event))
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, None)
    _said_written(f"wrote {target}")
    _say_late_stops()


@app.command()
def generate(
    out: Annotated[Path, typer.Option(
        help="A new or empty directory for rules.* and positions/part-* (written beside it, "
             "then renamed in whole).")],
    positions: Annotated[int, typer.Option(
        min=0, max=MAX_POSITIONS, help="Number of positions (positions x heaps at most "
        f"{MAX_ALL_HEAPS:,}; shuffled, at most {MAX_SHUFFLED_ROWS:,} rows).")] = 100_000,
    rule_sets: Annotated[int, typer.Option(
        min=1, max=MAX_RULE_SETS, help="Number of rule sets (rule sets x moves per set at "
        f"most {MAX_ALL_MOVES:,}).")] = 100,
    max_heap: Annotated[int, typer.Option(min=1, help="Heaps are uniform in 0..MAX_HEAP.")]
    = 10_000,
    moves_per_set: Annotated[int, typer.Option(
        min=1, max=MAX_MOVES_PER_SET, help="Each S has 1..MOVES_PER_SET moves.")] = 10,
    max_move: Annotated[int, typer.Option(min=0, help="Moves are in 1..MAX_MOVE, at most "
                                          "2^32-1 (0: up to MAX_HEAP, within 2^32-1).")] = 0,
    heaps: Annotated[int, typer.Option(min=0, max=MAX_HEAPS, help="Heaps per position.")] = 5,
    form: Annotated[Form, typer.Option(parser=_choice(Form), help="Positions form.")]
    = Form.wide,
    format: Annotated[Format, typer.Option("--format", parser=_choice(Format),
                                           help="File format.")] = Format.parquet,
    seed: Annotated[int, typer.Option(help="Random seed, 0..2^63-2 (same seed, same files).")] = 0,
    key_type: Annotated[KeyType, typer.Option(parser=_choice(KeyType),
        help="int: integer ids; string: rule ids as text (rs00042); uuid: text rule ids and "
             "UUID position ids.")] = KeyType.int,
    shuffle: Annotated[bool, typer.Option(
        help="Rows in random order (long form: a position's heaps scatter).")]
    = False,
    files: Annotated[int, typer.Option(
        min=0, max=MAX_FILES, help="Position files (0: one per million positions).")] = 0,
) -> None:
    """Write a seeded synthetic dataset for benchmarks and tests.

    The same seed draws the same positions (rule set and heaps) whatever the form, format,
    key type, order and number of files.
    """
    try:
        from pipeline.generate import Spec
        from pipeline.generate import generate as write_dataset

        _local_only(out, "--out")

        spec = Spec(positions, rule_sets, max_heap, moves_per_set, max_move, heaps, form.value,
                    format.value, seed, key_type.value, shuffle, files)
        written = _with_progress(lambda on_event: write_dataset(out, spec, on_event))
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, None)
    _said_written(f"wrote {len(written)} files under {out}")
    _say_late_stops()


def _read_bytes(path: Path) -> bytes:
    from pipeline.errors import InputError

    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", path=path) from None


_WRITE_FAILURES = (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG)
"""What a write to a full or failing stdout raises (a closed pipe is typer's: exit 1)."""


def main() -> None:  # pragma: no cover - called by the console entry, `executable.entry`
    """Run the command, then end the process without the interpreter's teardown where that is
    safe: freeing the libraries' module state (polars') costs a noticeable part of a short
    command (benchmarks/results). By then every output is closed; worker threads are joined and the
    log flushed here, through public calls. A process that loaded Spark exits normally, so
    that pyspark's exit handlers stop the JVM it started."""
    import threading

    set_process_defaults()  # done by the executable already; `python -m pipeline.cli` too
    ClosedStdout.install()  # if the shell closed stdout (`>&-`)
    ended = False  # the command returned or exited: what it printed stands
    late = False  # a stop signal after that: the exit code says it, the output stands
    try:
        os.getcwd()  # every relative path is read from it
    except FileNotFoundError:
        _err("error: the current directory no longer exists (removed, or replaced by a "
             "rename): change to one that does")
        sys.exit(EXIT_USAGE)
    try:
        try:
            stop_signals_as_interrupts()
            stops_held_until_taken()
            app()
            ended, code = True, 0
        except SystemExit as exc:
            ended = True  # before exit_status: a stop within it comes after the command
            code = exit_status(exc.code)
        except OSError as exc:  # click printing --help (commands print through `_say`)
            if exc.errno not in _WRITE_FAILURES and not isinstance(exc, StdoutClosed):
                raise
            _err(stdout_failed(exc))
            ended, code = True, EXIT_FAILED
        finally:
            if ended and code == EXIT_USAGE and stops_held():  # a refused line: no result,
                _forget_refused_runs_result(sys.argv[1:])  # a stop meanwhile kept, dropped
            drop_held_stops()
            default_stop_signals()
    except KeyboardInterrupt as exc:  # outside any command's handling (typer's set-up)
        code, late = 128 + (exc.signum if isinstance(exc, Stopped) else signal.SIGINT), ended
    if code == 130 and STOPPED_BY:  # typer reports any KeyboardInterrupt it meets as 130
        code = 128 + STOPPED_BY[0]
    if code in (130, *(128 + s for s in STOPPED_BY)) and not (late or _INTERRUPT_SAID):
        _say_stopped(code - 128 if STOPPED_BY else None)  # typer's set-up says nothing
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None when the shell closed it (`>&-`)
                stream.flush()
        except (OSError, ValueError):
            code = code or EXIT_FAILED
    if "pyspark" in sys.modules:
        sys.exit(code)
    for thread in threading.enumerate() if code in (0, EXIT_REJECTS) else ():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()  # a failed or stopped command does not wait for its readers
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()

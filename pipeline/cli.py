"""The `snim-batch` command line: parse, call one core function, render, map errors to exit codes.

This is the only module that imports typer; it and `pipeline.terminal` alone print or exit.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import re
import signal
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from pipeline.errors import (
    EXIT_FAILED,
    EXIT_REJECTS,
    BadRowsError,
    RuleError,
    SnimError,
    Stopped,
    UsageError,
    shown,
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
    QUIET_THREAD_POOLS,
    STOPPED_BY,
    configure_logging,
    default_stop_signals,
    exit_status,
    heavy_imports,
    interrupt_within,
    printable,
    progress_printer,
    stdin_bytes,
    stop_signals_as_interrupts,
    stopped_message,
)

app = typer.Typer(
    name="snim-batch",
    help="Decide who wins S-Nim positions in bulk: Parquet/CSV tables in, Parquet verdicts out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

DEFAULT_CONFIG = Path("config.yaml")


@app.callback()
def _every_command() -> None:
    """Decide who wins S-Nim positions in bulk: Parquet/CSV tables in, Parquet verdicts out."""
    configure_logging(quiet=False, verbose=False)
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
        raise ValueError(f"{shown(text)} is not one of {listed}.")

    return parse


def _say(message: str) -> None:
    """One line on stdout, printable."""
    typer.echo(printable(message))


def _err(message: str) -> None:
    """One line on stderr, printable."""
    typer.echo(f"snim-batch: {printable(message)}", err=True)


def _traceback(exc: BaseException) -> None:
    """The traceback (--verbose), each line printable: the exception messages carry data."""
    for chunk in traceback.format_exception(exc):
        for line in chunk.rstrip("\n").split("\n"):
            typer.echo(printable(line), err=True)


_INTERRUPT_SAID: list[bool] = []  # the interrupt was reported (see `main`)


def _say_stopped(signum: int | None) -> None:
    """The one line for a run stopped by Ctrl-C (None) or a stop signal."""
    _err(stopped_message(signum))
    _INTERRUPT_SAID.append(True)  # once it is out: a line cut short is said again by `main`


def _fail(exc: BaseException, verbose: bool) -> NoReturn:
    """Map an exception to its one-line message and documented exit code."""
    if isinstance(exc, SnimError):
        _err(f"error: {exc}")
        if isinstance(exc, BadRowsError):
            for problem in exc.problems:
                _err(f"  {problem}")
            if exc.total > len(exc.problems):
                _err(f"  ... and {exc.total - len(exc.problems)} more")
        if verbose:
            _traceback(exc)
        raise typer.Exit(exc.exit_code)
    exc = interrupt_within(exc) or exc
    if isinstance(exc, KeyboardInterrupt):
        signum = exc.signum if isinstance(exc, Stopped) else None
        _say_stopped(signum)
        raise typer.Exit(128 + (signum or signal.SIGINT))
    if isinstance(exc, MemoryError):  # staging was removed on the way here
        said = SnimError("out of memory", written=False, hint=" (give the process more "
                         "memory, or the job less work at once)")
        _err(f"error: {said}")
        raise typer.Exit(EXIT_FAILED)
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:  # one no check foresaw
        said = SnimError(f"{shown(exc.filename or '', 120)}: a name in this path is too long "
                         "for the file system", path=exc.filename, written=False)
        _err(f"error: {said}")
        raise typer.Exit(EXIT_FAILED)
    _err(f"internal error: {type(exc).__name__}: {exc} (nothing was written; rerun with "
         "--verbose for details and report it)")
    if verbose:
        _traceback(exc)
    raise typer.Exit(EXIT_FAILED)


def _spark_options(spark: Any, master: str | None, remote: str | None) -> Any:
    """The config's Spark section with the command line's --spark-master/--spark-remote."""
    if master is None and remote is None:
        return None
    changes = {"master": master, "remote": remote}
    return dataclasses.replace(spark, **{k: v for k, v in changes.items() if v is not None})


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


def _load(config: Path | None, rules: str | None, positions: str | None, out: str | None):
    from pipeline.config import config_from_dict, load_config

    given = {"rules": rules, "positions": positions, "out": out}
    for name, value in given.items():
        if value is not None and not value.strip():
            raise UsageError(f"--{name} is empty: give a path or URL")
    if config is not None:
        return load_config(config, given)
    if DEFAULT_CONFIG.exists():
        return load_config(DEFAULT_CONFIG, given)
    if rules and positions and out:
        return config_from_dict({"rules": rules, "positions": positions, "out": out},
                                "command line", Path.cwd())
    raise UsageError("no ./config.yaml here: pass --config FILE, or --rules, --positions "
                     "and --out")


@app.command(short_help="Evaluate every position; write verdicts, rejects and a manifest.")
def run(
    config: Annotated[Path | None, typer.Option(
        help="Config file (default: ./config.yaml). Relative paths in it are relative to it.")]
    = None,
    rules: Annotated[str | None, typer.Option(
        help="Rules table: a .parquet/.csv file, a directory of them, a glob, or a URL "
             "of an object store (s3://, gs://, az://). Default: the config's rules.")] = None,
    positions: Annotated[str | None, typer.Option(
        help="Positions table (wide or long form): a file, a directory, a glob, or a URL "
             "of an object store. Default: the config's positions.")] = None,
    out: Annotated[str | None, typer.Option(
        help="Output directory or URL of an object store (replaced atomically; a symbolic link "
             "is followed); with --format delta, the root of the Delta tables. Default: the "
             "config's out.")] = None,
    engine: Annotated[Engine | None, typer.Option(parser=_choice(Engine),
                                                  help="Execution engine. Default: the "
                                                  "config's engine, else polars.")] = None,
    winning_moves: Annotated[bool | None, typer.Option(
        "--winning-moves/--no-winning-moves",
        help="Add one winning move (move_heap, move_take) to every W verdict. Default: "
             "the config's winning_moves, else off.")] = None,
    on_bad_rows: Annotated[Policy | None, typer.Option(
        parser=_choice(Policy),
        help="reject: bad rows go to rejects.parquet, exit 3; fail: write nothing, exit 1. "
             "Default: the config's on_bad_rows, else reject.")]
    = None,
    overwrite: Annotated[bool | None, typer.Option(
        "--overwrite/--no-overwrite",
        help="Replace an existing snim-batch output (one whose manifest lists all it "
             "holds). Default: the config's overwrite, else off.")]
    = None,
    spark_master: Annotated[str | None, typer.Option(help="Spark master URL (--engine spark).")]
    = None,
    output_format: Annotated[OutputFormat | None, typer.Option(
        "--format", case_sensitive=False,
        help="parquet: one directory per run; delta: --out is a root of Delta tables that "
             "each run adds its night to. Default: the config's output.format, else "
             "parquet.")] = None,
    run_date: Annotated[str | None, typer.Option(
        help="The night (YYYY-MM-DD) a --format delta run replaces; default: today in UTC.")]
    = None,
    spark_remote: Annotated[str | None, typer.Option(
        help="Spark Connect server, sc://HOST:PORT (--engine spark; instead of a master).")]
    = None,
    memory_limit: Annotated[str | None, typer.Option(
        help="Memory the polars engine aims to stay within, e.g. 4GiB; past a quarter of it "
             "the verdicts go to scratch as sorted runs. auto: a quarter of the memory "
             "available, at most 3GiB. Default: the config's memory_limit, else auto.")]
    = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing but errors.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Show details and tracebacks.")]
    = False,
) -> None:
    """Evaluate every position; write verdicts, rejects, sg_tables, summary and a manifest.

    Exit codes: 0 clean; 1 run failed (nothing written); 2 usage or config error;
    3 completed, but some rows were rejected (see rejects.parquet).
    """
    try:
        with heavy_imports():
            import pipeline.engines.polars_engine  # noqa: F401 - the default engine's modules
            from pipeline.config import memory_bytes, resolve_location, resolve_output
            from pipeline.run import run_job

        cfg = _load(config, rules, positions, out)
        cfg = cfg.override(
            rules=resolve_location(rules, Path.cwd()) if rules else None,
            positions=resolve_location(positions, Path.cwd()) if positions else None,
            out=resolve_output(out, Path.cwd()) if out else None,
            engine=engine.value if engine else None,
            winning_moves=winning_moves,
            on_bad_rows=on_bad_rows.value if on_bad_rows else None,
            overwrite=overwrite,
            spark=_spark_options(cfg.spark, spark_master, spark_remote),
            output=(dataclasses.replace(cfg.output, format=output_format.value)
                    if output_format else None),
            memory_limit=(memory_bytes(memory_limit, "--memory-limit")
                          if memory_limit is not None else None),
        )
        night = _run_date(run_date) if run_date is not None else None
        configure_logging(quiet, verbose)
        _warn_unused_spark(cfg.engine, spark_master, spark_remote)
        progress = progress_printer(quiet, verbose)
        result = run_job(cfg, progress, night, lambda warning: _err(f"warning: {warning}"))
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, verbose)
    if not quiet:
        counts = result.manifest["counts"]
        pos, rul = counts["positions"], counts["rules"]
        _say(f"wrote {result.out}: {pos['verdicts']} verdicts (W {pos['W']}, "
             f"L {pos['L']}) from {pos['rows_read']} position rows; rejected "
             f"{pos['rows_rejected']} position rows and {rul['rows_rejected']} rule rows")
        if "run_date" in result.manifest:
            _say(f"committed night {result.manifest['run_date']} as run "
                 f"{result.manifest['run_id']} (runs table version "
                 f"{result.manifest['table_versions']['runs']})")
        if result.problems:
            _err(f"some rows were rejected (exit 3); first ones, all in "
                 f"{result.rejects}:")
            for problem in result.problems[:5]:
                _err(f"  {problem}")
    raise typer.Exit(result.exit_code)


def _run_date(text: str):
    from datetime import date

    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    from pipeline.errors import shown

    raise UsageError(f"--run-date: expected a date YYYY-MM-DD, got {shown(text)}")


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
        _fail(exc, False)
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
        _fail(exc, False)
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
        _fail(exc, False)
    sys.stdout.write(text)
    sys.stdout.flush()


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

        data = stdin_bytes() if str(source) == "-" else _read_bytes(source)
        written = convert_classic(data, out, overwrite)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, False)
    _say(f"wrote {', '.join(str(p) for p in written)}")


@app.command(short_help="Render a run's outputs as one self-contained HTML page.")
def report(
    out_dir: Annotated[str, typer.Argument(metavar="OUT_DIR", help="A run's output directory.")],
    html_file: Annotated[Path | None, typer.Option(
        "--html", help="Where to write the page (default: OUT_DIR/report.html).")] = None,
) -> None:
    """Render a run's outputs as one self-contained HTML page (no network needed to view)."""
    try:
        from pipeline.report import write_report

        target = write_report(out_dir, html_file)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, False)
    _say(f"wrote {target}")


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
    max_move: Annotated[int, typer.Option(min=0, help="Moves are in 1..MAX_MOVE "
                                          "(0: up to MAX_HEAP).")] = 0,
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

        spec = Spec(positions, rule_sets, max_heap, moves_per_set, max_move, heaps, form.value,
                    format.value, seed, key_type.value, shuffle, files)
        written = write_dataset(out, spec)
    except (Exception, KeyboardInterrupt) as exc:
        _fail(exc, False)
    _say(f"wrote {len(written)} files under {out}")


def _read_bytes(path: Path) -> bytes:
    from pipeline.errors import InputError

    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def main() -> None:  # pragma: no cover - called by the console entry, `executable.entry`
    """Run the command, then end the process without the interpreter's teardown where that is
    safe: freeing the libraries' module state (polars') costs a noticeable part of a short
    command (benchmarks/results). By then every output is closed; worker threads are joined and the
    log flushed here, through public calls. A process that loaded Spark exits normally, so
    that pyspark's exit handlers stop the JVM it started."""
    import os
    import threading

    for name, value in QUIET_THREAD_POOLS.items():
        os.environ.setdefault(name, value)
    ended = False  # the command returned or exited: what it printed stands
    late = False  # a stop signal after that: the exit code says it, the output stands
    try:
        try:
            stop_signals_as_interrupts()
            app()
            ended, code = True, 0
        except SystemExit as exc:
            ended = True  # before exit_status: a stop within it comes after the command
            code = exit_status(exc.code)
        finally:
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

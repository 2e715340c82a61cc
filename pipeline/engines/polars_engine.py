"""The default engine: polars frames and the numba kernels on one machine."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import polars as pl

from pipeline import io, transforms
from pipeline.config import Config
from pipeline.engines import EngineResult
from pipeline.errors import InputError
from pipeline.grundy import TableSet, build_table

Phase = Callable[[str], AbstractContextManager[None]]


def read_rules(config: Config) -> tuple[pl.DataFrame, list[io.InputFile]]:
    """All rules files, normalised and validated (reasons on bad rows)."""
    frames, files = [], []
    for raw in io.read_tables(config.rules, "rules"):
        source = str(raw.file.path)
        frame = transforms.normalize_rules(raw.frame, raw.row, source, config.columns)
        frames.append(_with_bad_lines(frame, raw))
        files.append(raw.file)
    frames = transforms.unify_key_types(frames, "rule_set_id")
    rules = pl.concat(frames, how="vertical_relaxed")
    return transforms.reject_duplicate_rules(rules), files


def read_positions(config: Config) -> tuple[pl.DataFrame, list[io.InputFile], str]:
    """All positions files, normalised to wide form with reasons (form detected per file)."""
    frames, files, forms = [], [], set()
    next_row = 0
    for raw in io.read_tables(config.positions, "positions"):
        source = str(raw.file.path)
        form = transforms.detect_form(raw.frame.columns, config.columns, source)
        forms.add(form)
        if len(forms) > 1:
            raise InputError(f"{source}: is in {form} form but earlier positions files are not; "
                             "use one form per run")
        frame = transforms.normalize_positions(raw.frame, raw.row, source, config.columns, form,
                                               next_row)
        next_row += raw.frame.height + len(raw.bad_lines)
        frames.append(_with_bad_lines(frame, raw))
        files.append(raw.file)
    return pl.concat(frames, how="vertical_relaxed"), files, forms.pop()


def _with_bad_lines(frame: pl.DataFrame, raw: io.RawTable) -> pl.DataFrame:
    """Add the CSV lines the reader skipped (wrong field count) as rejected rows."""
    if not raw.bad_lines:
        return frame
    bad = pl.DataFrame({
        "_source": [str(raw.file.path)] * len(raw.bad_lines),
        "_row": [r for r, _ in raw.bad_lines],
        "_reason": [why for _, why in raw.bad_lines],
    }, schema={"_source": pl.String, "_row": pl.Int64, "_reason": pl.String})
    return pl.concat([frame, bad], how="diagonal_relaxed").sort("_row")


def execute(config: Config, staging: Path, phase: Phase) -> EngineResult:
    """Read, validate, tabulate, evaluate and write every output but the manifest."""
    with phase("read"):
        rules, rule_files = read_rules(config)
        positions, position_files, form = read_positions(config)
        rules, positions = _unify_rule_ids(rules, positions)
    with phase("validate"):
        distinct, index = transforms.rule_index(rules)
        long_rejects = None
        if form == "long":
            positions, long_rejects = transforms.long_to_wide(positions)
        else:
            positions = transforms.reject_duplicate_positions(positions)
        positions = transforms.attach_tables(positions, index)
    with phase("tables"):
        need = transforms.needed_lengths(positions, len(distinct))
        probe = config.tables.period_probe_ops // max(1, len(distinct))
        tables = TableSet.of([
            build_table(rule, int(n), config.tables.max_table_len, probe)
            for rule, n in zip(distinct, need)
        ])
    with phase("evaluate"):
        evaluated = transforms.evaluate(positions, tables, config.winning_moves)
        verdicts = transforms.verdict_rows(evaluated, config.winning_moves)
        rejected_positions = evaluated.filter(pl.col("_reason").is_not_null())
        if form == "long":
            rejected_positions = transforms.expand_long_rejects(rejected_positions)
        parts = [transforms.reject_rows(rules, "rules"),
                 transforms.reject_rows(rejected_positions, "positions")]
        if long_rejects is not None:
            parts.append(transforms.reject_rows(long_rejects, "positions"))
        rejects = transforms.sort_rejects(pl.concat(parts))
        summary = transforms.summary_rows(index, verdicts, rejects)
        sg_tables = transforms.sg_table_rows(rules, distinct, tables, index)
    counts = _counts(rules, positions, form, long_rejects, verdicts, rejects)
    problems = [_problem(r) for r in rejects.head(10).iter_rows(named=True)]
    if rejects.height and config.on_bad_rows == "fail":
        return EngineResult(_inputs(rule_files, position_files), counts, form, problems)
    with phase("write"):
        io.write_parquet(verdicts, staging / "verdicts.parquet")
        io.write_parquet(rejects, staging / "rejects.parquet")
        io.write_parquet(sg_tables, staging / "sg_tables.parquet")
        io.write_parquet(summary, staging / "summary.parquet")
    return EngineResult(_inputs(rule_files, position_files), counts, form, problems)


def _unify_rule_ids(rules: pl.DataFrame, positions: pl.DataFrame
                    ) -> tuple[pl.DataFrame, pl.DataFrame]:
    rules, positions = transforms.unify_key_types([rules, positions], "rule_set_id")
    (positions,) = transforms.unify_key_types([positions], "position_id")
    return rules, positions


def _inputs(rule_files: list[io.InputFile], position_files: list[io.InputFile]) -> dict:
    return {"rules": [f.as_dict() for f in rule_files],
            "positions": [f.as_dict() for f in position_files]}


def _problem(row: dict) -> str:
    column = f", column {row['column']}" if row["column"] else ""
    return f"{row['source']} row {row['row']}{column}: {row['reason']}"


def _counts(rules: pl.DataFrame, positions: pl.DataFrame, form: str,
            long_rejects: pl.DataFrame | None, verdicts: pl.DataFrame,
            rejects: pl.DataFrame) -> dict[str, dict[str, int]]:
    rule_rejects = rejects.filter(pl.col("table") == "rules").height
    position_rejects = rejects.filter(pl.col("table") == "positions").height
    if form == "long":
        rows_read = int(positions["_rows"].list.len().sum() or 0) + (
            long_rejects.height if long_rejects is not None else 0)
        evaluated_rows = rows_read - position_rejects
    else:
        rows_read = positions.height
        evaluated_rows = verdicts.height
    w = verdicts.filter(pl.col("verdict") == "W").height
    return {
        "rules": {"rows_read": rules.height, "rows_accepted": rules.height - rule_rejects,
                  "rows_rejected": rule_rejects},
        "positions": {"rows_read": rows_read, "rows_evaluated": evaluated_rows,
                      "rows_rejected": position_rejects, "verdicts": verdicts.height,
                      "W": w, "L": verdicts.height - w},
    }

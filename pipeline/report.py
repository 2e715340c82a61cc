"""A run's outputs as one self-contained HTML page (inline CSS and SVG, no network, no JS)."""

from __future__ import annotations

import html
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from pipeline.errors import InputError, MissingExtra, UsageError, truncated
from pipeline.events import OnEvent, ignore, phase
from pipeline.io.outputs.failures import PID_WIDTH, name_problem, refuse_long_names
from pipeline.io.outputs.kinds import page_output_for
from pipeline.io.outputs.manifest import few_names, read_manifest, resized_tables
from pipeline.io.outputs.publish import PAGE_FILE, TAG_WIDTH, new_tag, write_file
from pipeline.io.store.locations import Location

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}.ok{color:#2e7d32}
.bad{color:#c62828}code{background:#f5f5f5;padding:0 3px}h3{font-size:1em;margin:.8em 0 .2em}
.cols{display:flex;gap:1.5em;flex-wrap:wrap}
"""


_SHOWN_ROWS = 60  # rule sets drawn one bar each and listed in full up to this many
_STANDOUTS = 10  # rule sets listed as highest, lowest, most rejects
_BINS = 20  # W-rate histogram bins of 5 points each
_NIGHTS = 14  # nights shown across nights (the latest)
_SHOWN_REJECTS = 100  # the first rejected rows listed


@dataclass(frozen=True)
class ShownRejects:
    """What the page shows of a rejects table: its first rows, its row count and its rows
    per reason_code (`reason_code_counts`), read without holding the table (a bad night's
    can be tens of millions of rows)."""

    first: pl.DataFrame
    rows: int
    by_reason_code: pl.DataFrame

    @classmethod
    def scanned(cls, table: ds.Dataset, dropped: tuple[str, ...] = ()) -> ShownRejects:
        """From a dataset (Parquet files, a Delta night), a record batch at a time;
        `dropped`: columns the page does not show."""
        shown = [name for name in table.schema.names if name not in dropped]
        first = pl.DataFrame(table.scanner(  # no read-ahead: Dataset.head read them all
            columns=shown, batch_size=_SHOWN_REJECTS, batch_readahead=0,
            fragment_readahead=0).head(_SHOWN_REJECTS))
        counted: Counter[str] = Counter()
        rows = 0
        has_code = "reason_code" in shown
        for batch in table.to_batches(columns=["reason_code"] if has_code else []):
            rows += batch.num_rows
            if has_code:
                for item in pc.value_counts(batch.column(0)).to_pylist():
                    counted[item["values"]] += item["counts"]
        return cls(first, rows, reason_code_counts(counted))


def _cell(column: str, value: Any) -> str:
    """A value as the page shows it: counts with thousands separators, rates to 4 places,
    identifiers as they are."""
    if value is None:
        return "<td></td>"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"<td class=l>{html.escape(str(value))}</td>"
    if isinstance(value, float):
        text = f"{value:.1%}" if column.endswith("rate") else f"{value:,.4f}"
    else:
        text = str(value) if column.endswith(("_id", "_ids")) else f"{value:,}"
    return f"<td>{text}</td>"


def _table(frame: pl.DataFrame, limit: int = 200, where: str = "the Parquet file",
           total: int | None = None) -> str:
    """The first `limit` rows of `frame` (of `total`, default its height) as a table."""
    total = frame.height if total is None else total
    head = "".join(f"<th class=l>{html.escape(c)}</th>" for c in frame.columns)
    rows = ["<tr>" + "".join(_cell(c, v) for c, v in zip(frame.columns, row, strict=True))
            + "</tr>" for row in frame.head(limit).iter_rows()]
    more = (f"<p>… {total - limit:,} more rows in {where}.</p>" if total > limit else "")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


def _bar_chart(summary: pl.DataFrame) -> str:
    """Horizontal bars of the W rate per rule set, as inline SVG (a few rule sets only)."""
    data = summary.filter(pl.col("w_rate").is_not_null())
    if data.is_empty():
        return "<p>No evaluated positions.</p>"
    bar_h, label_w, width = 18, 160, 520
    height = bar_h * data.height + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + width + 70}" '
             f'height="{height}" role="img" aria-label="W rate per rule set">']
    for i, (rid, rate, n) in enumerate(data.select("rule_set_id", "w_rate", "positions")
                                       .iter_rows()):
        y = 20 + i * bar_h
        w = max(rate * width, 0.5)
        parts.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" '
                     f'font-size="12">{html.escape(str(rid))}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{bar_h - 4}" '
                     f'fill="#4a7ebb"><title>{html.escape(str(rid))}: {rate:.3f} of {n:,}'
                     '</title></rect>')
        parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 13}" font-size="11">'
                     f'{rate:.1%}</text>')
    parts.append(f'<text x="{label_w}" y="12" font-size="11">W rate (share of positions the '
                 'first player wins)</text></svg>')
    return "".join(parts)


def w_rate_histogram(summary: pl.DataFrame) -> list[int]:
    """How many rule sets have a W rate in each of _BINS equal bins of [0, 1] (1 in the
    last)."""
    rates = summary["w_rate"].drop_nulls()
    bins = (rates * _BINS).floor().cast(pl.Int64).clip(0, _BINS - 1)
    counts = bins.value_counts()
    found = dict(zip(counts[bins.name].to_list(), counts["count"].to_list(), strict=True))
    return [found.get(b, 0) for b in range(_BINS)]


def _histogram(summary: pl.DataFrame) -> str:
    """The distribution of W rates over the rule sets, as an inline SVG column chart."""
    counts = w_rate_histogram(summary)
    total = sum(counts)
    if not total:
        return "<p>No evaluated positions.</p>"
    left, top, plot_w, plot_h = 50, 24, 800, 220
    col_w = plot_w / _BINS
    peak = max(counts)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + plot_w + 20}" '
             f'height="{top + plot_h + 40}" role="img" aria-label="W rate distribution">',
             f'<text x="{left}" y="14" font-size="11">rule sets per W-rate bin '
             f'({total:,} rule sets with evaluated positions)</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" '
             f'y2="{top + plot_h}" stroke="#888"/>']
    for b, n in enumerate(counts):
        h = plot_h * n / peak
        x = left + b * col_w
        low, high = b / _BINS, (b + 1) / _BINS
        parts.append(f'<rect x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" width="{col_w - 2:.1f}" '
                     f'height="{h:.1f}" fill="#4a7ebb"><title>{low:.0%}-{high:.0%}: {n:,} rule '
                     'sets</title></rect>')
        if n:
            parts.append(f'<text x="{x + col_w / 2:.1f}" y="{top + plot_h - h - 3:.1f}" '
                         f'text-anchor="middle" font-size="10">{n:,}</text>')
    for b in range(0, _BINS + 1, 2):
        parts.append(f'<text x="{left + b * col_w:.1f}" y="{top + plot_h + 14}" '
                     f'text-anchor="middle" font-size="10">{b / _BINS:.0%}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 32}" text-anchor="middle" '
                 'font-size="11">W rate</text></svg>')
    return "".join(parts)


def standouts(summary: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The rule sets that stand out: highest and lowest W rate (ties by id), most rejected
    rows (only those with any)."""
    rated = summary.filter(pl.col("w_rate").is_not_null()).select(
        "rule_set_id", "positions", "w_rate", "rejected")
    return {
        "highest W rate": rated.sort(["w_rate", "rule_set_id"], descending=[True, False])
        .head(_STANDOUTS),
        "lowest W rate": rated.sort(["w_rate", "rule_set_id"]).head(_STANDOUTS),
        "most rejected rows": summary.filter(pl.col("rejected") > 0)
        .sort(["rejected", "rule_set_id"], descending=[True, False])
        .select("rule_set_id", "positions", "w_rate", "rejected").head(_STANDOUTS)}


def _standouts(summary: pl.DataFrame) -> str:
    parts = []
    for title, frame in standouts(summary).items():
        body = _table(frame) if frame.height else "<p>None.</p>"
        parts.append(f"<div class=col><h3>{title}</h3>{body}</div>")
    return f"<div class=cols>{''.join(parts)}</div>"


def _per_rule_set(summary: pl.DataFrame, where: str) -> str:
    if summary.height <= _SHOWN_ROWS:
        return _bar_chart(summary) + _table(summary, where=where)
    return (f"<p>{summary.height:,} rule sets: the first {_SHOWN_ROWS} by id below; all of "
            f"them in {where}.</p>" + _table(summary, _SHOWN_ROWS, where))


def nights_table(nights: pl.DataFrame, summaries: pl.DataFrame) -> pl.DataFrame:
    """W rate per rule set across the latest nights: one row per rule set, one column per
    night; the rule sets whose W rate moved most across them first (then by id), at most
    _SHOWN_ROWS."""
    shown = nights.sort("run_date").tail(_NIGHTS)["run_date"].to_list()
    data = summaries.filter(pl.col("run_date").is_in(shown)).with_columns(
        pl.col("run_date").cast(pl.String))
    wide = data.pivot("run_date", index="rule_set_id", values="w_rate",
                      aggregate_function="first")
    dates = [d.isoformat() for d in shown if d.isoformat() in wide.columns]
    spread = pl.max_horizontal(dates) - pl.min_horizontal(dates)
    return (wide.with_columns(spread.alias("spread"))
            .sort(["spread", "rule_set_id"], descending=[True, False], nulls_last=True)
            .select("rule_set_id", *[pl.col(d).alias(f"{d} w_rate") for d in dates],
                    pl.col("spread").alias("spread of w_rate")).head(_SHOWN_ROWS))


def _across_nights(nights: pl.DataFrame | None, summaries: pl.DataFrame | None) -> str:
    if nights is None or summaries is None:
        return ""
    runs = nights.sort("run_date").select("run_date", "run_id", "status", "verdicts", "W",
                                          "w_rate", "positions_rows_rejected")
    table = nights_table(nights, summaries)
    return (f"<h2>Across nights</h2>{_table(runs, _NIGHTS * 10, 'the runs table')}"
            f"<h3>W rate per rule set, the latest {_NIGHTS} nights at most (rule sets whose W "
            f"rate moved most first)</h3>{_table(table, _SHOWN_ROWS, 'the summary table')}")


def render_report(manifest: dict[str, Any], summary: pl.DataFrame, sg_tables: pl.DataFrame,
                  rejects: ShownRejects, nights: pl.DataFrame | None = None,
                  summaries: pl.DataFrame | None = None, where: str = "summary.parquet"
                  ) -> str:
    """The HTML page for one run; with `nights` (the runs table) and `summaries` (every
    night's summary rows) also the W rate per rule set across nights."""
    counts = manifest.get("counts", {})
    rows = []
    for table, c in counts.items():
        evaluated = c.get("rows_evaluated", c.get("rows_accepted", 0))
        ok = c.get("rows_read") == evaluated + c.get("rows_rejected", 0)
        mark = "<span class=ok>reconciles</span>" if ok else "<span class=bad>MISMATCH</span>"
        rows.append(f"<tr><td class=l>{table}</td>{_cell('rows', c.get('rows_read'))}"
                    f"{_cell('rows', evaluated)}{_cell('rows', c.get('rows_rejected'))}"
                    f"<td class=l>{mark}</td></tr>")
    pos = counts.get("positions", {})
    status = html.escape(str(manifest.get("status")))
    periods = sg_tables.with_columns(
        pl.col("moves").cast(pl.List(pl.String)).list.join(" ").alias("moves"),
        pl.col("rule_set_ids").cast(pl.List(pl.String)).list.join(", ").alias("rule_set_ids"))
    night = (f" for the night <b>{html.escape(str(manifest['run_date']))}</b>"
             if manifest.get("run_date") else "")
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>snim-batch run {html.escape(str(
        manifest.get('run_id')))}</title><style>{_CSS}</style></head><body>
<h1>snim-batch run <code>{html.escape(str(manifest.get('run_id')))}</code></h1>
<p>Status <b>{status}</b> (exit code {manifest.get('exit_code')}){night}, engine
{html.escape(str(manifest.get('engine')))}, {html.escape(str(manifest.get('started_at')))} to
{html.escape(str(manifest.get('finished_at')))}.</p>
<h2>Counts and reconciliation</h2>
<table><tr><th class=l>table</th><th>rows read</th><th>evaluated / accepted</th>
<th>rejected</th><th class=l>check</th></tr>{''.join(rows)}</table>
<p>{pos.get('verdicts', 0):,} verdicts: {pos.get('W', 0):,} W, {pos.get('L', 0):,} L.</p>
<h2>Distribution of W rates over the {summary.height:,} rule sets</h2>{_histogram(summary)}
<h2>Rule sets that stand out</h2>{_standouts(summary)}
<h2>W rate per rule set</h2>{_per_rule_set(summary, where)}
{_across_nights(nights, summaries)}
<h2>SG tables (one per distinct rule)</h2>{_period_statuses(sg_tables)}{_table(
        periods, _SHOWN_ROWS, where.replace('summary', 'sg_tables'))}
<h2>Rejected rows</h2>{_reject_policy(manifest)}{_by_reason_code(rejects.by_reason_code)}{
    _table(rejects.first, _SHOWN_REJECTS, where.replace('summary', 'rejects'), rejects.rows)
    if rejects.rows else '<p>None.</p>'}
<h2>Inputs and configuration</h2>
<pre>{html.escape(json.dumps({k: manifest.get(k) for k in ('inputs', 'config', 'versions',
                                                       'timings_s')}, indent=2))}</pre>
</body></html>
"""


def period_status_counts(sg_tables: pl.DataFrame) -> pl.DataFrame:
    """(period_status, tables, meaning) for every status, in the order of `PeriodStatus`
    (an output written before the column existed: empty)."""
    from pipeline.transforms.outputs import PERIOD_STATUS_MEANING

    if "period_status" not in sg_tables.columns:
        return pl.DataFrame(schema={"period_status": pl.String, "tables": pl.Int64,
                                    "meaning": pl.String})
    found = dict(sg_tables.group_by("period_status").len("tables").iter_rows())
    return pl.DataFrame({"period_status": [s.value for s in PERIOD_STATUS_MEANING],
                         "tables": [found.get(s.value, 0) for s in PERIOD_STATUS_MEANING],
                         "meaning": list(PERIOD_STATUS_MEANING.values())},
                        schema={"period_status": pl.String, "tables": pl.Int64,
                                "meaning": pl.String})


def _period_statuses(sg_tables: pl.DataFrame) -> str:
    counts = period_status_counts(sg_tables)
    if not counts.height:
        return ""
    return ("<p>period_status says why period is what it is (null only when it is not "
            f"proven):</p>{_table(counts)}")


def reason_code_counts(counted: dict[str, int]) -> pl.DataFrame:
    """(reason_code, rows) of rows counted per code, most first (then by code); empty for
    none (or an output written before the column existed)."""
    return pl.DataFrame(list(counted.items()), schema={"reason_code": pl.String,
                                                       "rows": pl.UInt32}, orient="row",
                        ).sort(["rows", "reason_code"], descending=[True, False])


def _by_reason_code(counts: pl.DataFrame) -> str:
    if not counts.height:
        return ""
    return f"<h3>Rejected rows by reason_code</h3>{_table(counts)}<h3>The first rows</h3>"


def _reject_policy(manifest: dict[str, Any]) -> str:
    """The run's tolerance of rejected rows and what it decided (from the manifest)."""
    rejects = manifest.get("rejects")
    if not isinstance(rejects, dict) or not rejects.get("rows"):
        return ""
    policy = rejects.get("policy", {})
    limits = [f"{name} {policy[name]}" for name in ("max_rejected_rows", "max_rejected_rate")
              if policy.get(name) is not None]
    decided = {"within_tolerance": "within the tolerance: the run succeeded",
               "over_tolerance": "over the tolerance: the run exited 3"}.get(
        str(rejects.get("decision")), str(rejects.get("decision")))
    return (f"<p>{rejects['rows']:,} rows rejected ({rejects.get('rate', 0):.2%} of the rows "
            f"read); tolerance {html.escape(', '.join(limits) or 'none (any rejected row)')}"
            f": {html.escape(decided)}.</p>")


def write_report(out: str | Path, target: Path | None = None, on_event: OnEvent = ignore
                 ) -> Path:
    """Render the run in the local directory `out` (or the latest night of a local Delta
    table root) to `target` (default OUT/report.html); returns it. A page directly in a run's
    output is listed in its manifest, so that the directory stays provably a snim-batch
    output (see `publish.page_destination` for what is refused); a Delta table root has no
    manifest, so its page is written whole like a page elsewhere. Either way the page is
    written through the `Output` protocol (`page_output_for`): whole, or not at all.
    `on_event` hears the phases (read, write)."""
    location = Location.parse(str(out), Path.cwd())
    if location.is_remote or location.path is None:
        raise UsageError(f"{location}: report reads a local output directory; copy the "
                         "output's manifest.json and the files it lists first")
    out_dir = location.path if "://" in str(out) else Path(out)  # as given, for messages
    problem = name_problem(out_dir.absolute())
    if problem is not None:
        raise InputError(f"{truncated(str(out_dir), 120)}: cannot read it ({problem})")
    target = target or out_dir / "report.html"
    refuse_long_names(target, "--html", "its temporary file .NAME.tmp-PID-TAG",
                      len("..tmp--") + PID_WIDTH + TAG_WIDTH)
    table_root = (out_dir / "runs" / "_delta_log").is_dir()
    with phase(on_event, "read"):
        page = _delta_page(out_dir) if table_root else _run_page(out_dir)
    with phase(on_event, "write"):
        output = page_output_for(out_dir, target, in_output=not table_root,
                                 on_event=on_event)
        staging = output.stage(new_tag())
        try:
            write_file(staging / PAGE_FILE, page.encode("utf-8"))
            output.commit({})
        except BaseException as error:
            output.roll_back(error)
            raise
    return target


def _run_page(out_dir: Path) -> str:
    manifest = read_manifest(out_dir)
    try:
        resized = resized_tables(out_dir, manifest)
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot list it ({exc.strerror})", path=out_dir) from None
    if resized:
        raise InputError(f"{out_dir}: files changed size since its run wrote them "
                         f"({few_names(resized)}): a damaged output; run it again",
                         path=out_dir)
    for name in ("summary", "sg_tables", "rejects"):
        table = out_dir / f"{name}.parquet"  # a file, or the Spark engine's directory of parts
        if table.exists() and not (table.is_file() or table.is_dir()):
            raise InputError(f"{table}: not a regular file (a pipe or device; reading it "
                             "could wait forever): not an output as snim-batch writes them",
                             path=table)
    try:
        frames = {name: pl.read_parquet(out_dir / f"{name}.parquet", glob=False)
                  for name in ("summary", "sg_tables")}
        rejects = ShownRejects.scanned(ds.dataset(_parquet_files(out_dir / "rejects.parquet"),
                                                  format="parquet"))
    except (OSError, pl.exceptions.PolarsError, pa.ArrowException) as exc:
        raise InputError(f"{out_dir}: cannot read run outputs ({truncated(str(exc), 200)})"
                         ) from None
    try:
        return render_report(manifest, frames["summary"], frames["sg_tables"], rejects)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a field of another shape
        raise InputError(f"{out_dir / 'manifest.json'}: not a manifest as snim-batch writes "
                         f"them ({type(exc).__name__}: {truncated(str(exc), 120)})") from None


def _parquet_files(table: Path) -> list[str]:
    """A table's Parquet files: the file, or the part files of the Spark engine's
    directory (a missing file is the reader's error, which names it)."""
    return sorted(map(str, table.glob("*.parquet"))) if table.is_dir() else [str(table)]


def _delta_page(root: Path) -> str:
    """The latest night of a Delta table root, with the W rates of every night."""
    try:
        from pipeline.io.outputs.delta_tables import TableRoot, delta_cause, latest_night
    except ImportError:
        raise MissingExtra("report on a Delta table root", "delta") from None
    try:
        night = latest_night(TableRoot(str(root)))
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"{root}: cannot read the Delta tables ({delta_cause(exc)})"
                         ) from None
    try:
        rejects = ShownRejects.scanned(night["rejects"], dropped=("run_date", "run_id"))
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{root}: cannot read the Delta tables ({delta_cause(exc)})"
                         ) from None
    return render_report(night["manifest"], night["summary"], night["sg_tables"], rejects,
                         night["runs"], night["summaries"], "the summary table")

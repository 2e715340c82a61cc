"""A run's outputs as one self-contained HTML page (inline CSS and SVG, no network, no JS)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.errors import InputError, UsageError, cut
from pipeline.io.locations import Location
from pipeline.io.manifest import read_manifest
from pipeline.io.publish import place_page

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}.ok{color:#2e7d32}
.bad{color:#c62828}code{background:#f5f5f5;padding:0 3px}
"""


def _table(frame: pl.DataFrame, limit: int = 200) -> str:
    head = "".join(f"<th class=l>{html.escape(c)}</th>" for c in frame.columns)
    rows = []
    for row in frame.head(limit).iter_rows():
        cells = []
        for v in row:
            text = "" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))
            cls = "" if isinstance(v, (int, float)) and not isinstance(v, bool) else " class=l"
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = (f"<p>… {frame.height - limit} more rows in the Parquet file.</p>"
            if frame.height > limit else "")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


def _bar_chart(summary: pl.DataFrame, limit: int = 60) -> str:
    """Horizontal bars of the W rate per rule set, as inline SVG."""
    data = summary.filter(pl.col("w_rate").is_not_null()).head(limit)
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
                     f'fill="#4a7ebb"><title>{html.escape(str(rid))}: {rate:.3f} of {n}'
                     '</title></rect>')
        parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 13}" font-size="11">'
                     f'{rate:.1%}</text>')
    parts.append(f'<text x="{label_w}" y="12" font-size="11">W rate (share of positions the '
                 'first player wins)</text></svg>')
    more = f"<p>First {limit} of {summary.height} rule sets.</p>" if summary.height > limit \
        else ""
    return "".join(parts) + more


def render_report(manifest: dict[str, Any], summary: pl.DataFrame, sg_tables: pl.DataFrame,
                  rejects: pl.DataFrame) -> str:
    """The HTML page for one run."""
    counts = manifest.get("counts", {})
    rows = []
    for table, c in counts.items():
        evaluated = c.get("rows_evaluated", c.get("rows_accepted", 0))
        ok = c.get("rows_read") == evaluated + c.get("rows_rejected", 0)
        mark = "<span class=ok>reconciles</span>" if ok else "<span class=bad>MISMATCH</span>"
        rows.append(f"<tr><td class=l>{table}</td><td>{c.get('rows_read')}</td>"
                    f"<td>{evaluated}</td><td>{c.get('rows_rejected')}</td>"
                    f"<td class=l>{mark}</td></tr>")
    pos = counts.get("positions", {})
    status = html.escape(str(manifest.get("status")))
    periods = sg_tables.with_columns(
        pl.col("moves").cast(pl.List(pl.String)).list.join(" ").alias("moves"),
        pl.col("rule_set_ids").list.join(", ").alias("rule_set_ids"))
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>snim-batch run {html.escape(str(
        manifest.get('run_id')))}</title><style>{_CSS}</style></head><body>
<h1>snim-batch run <code>{html.escape(str(manifest.get('run_id')))}</code></h1>
<p>Status <b>{status}</b> (exit code {manifest.get('exit_code')}), engine
{html.escape(str(manifest.get('engine')))}, {html.escape(str(manifest.get('started_at')))} to
{html.escape(str(manifest.get('finished_at')))}.</p>
<h2>Counts and reconciliation</h2>
<table><tr><th class=l>table</th><th>rows read</th><th>evaluated / accepted</th>
<th>rejected</th><th class=l>check</th></tr>{''.join(rows)}</table>
<p>{pos.get('verdicts', 0)} verdicts: {pos.get('W', 0)} W, {pos.get('L', 0)} L.</p>
<h2>W rate per rule set</h2>{_bar_chart(summary)}
{_table(summary)}
<h2>SG tables (one per distinct rule)</h2>{_table(periods)}
<h2>Rejected rows</h2>{_table(rejects, 100) if rejects.height else '<p>None.</p>'}
<h2>Inputs and configuration</h2>
<pre>{html.escape(json.dumps({k: manifest.get(k) for k in ('inputs', 'config', 'versions',
                                                       'timings_s')}, indent=2))}</pre>
</body></html>
"""


def write_report(out: str | Path, target: Path | None = None) -> Path:
    """Render the run in the local directory `out` to `target` (default OUT/report.html);
    returns it. A page directly in the output is listed in its manifest, so that the
    directory stays provably a snim-batch output; see `place_page` for what is refused."""
    location = Location.parse(str(out), Path.cwd())
    if location.is_remote or location.path is None:
        raise UsageError(f"{location}: report reads a local output directory; copy the "
                         "output's manifest.json and the files it lists first")
    out_dir = location.path if "://" in str(out) else Path(out)  # as given, for messages
    manifest = read_manifest(out_dir)
    try:
        frames = {name: pl.read_parquet(out_dir / f"{name}.parquet")
                  for name in ("summary", "sg_tables", "rejects")}
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"{out_dir}: cannot read run outputs ({cut(str(exc), 200)})") from None
    page = render_report(manifest, frames["summary"], frames["sg_tables"], frames["rejects"])
    target = target or out_dir / "report.html"
    place_page(out_dir, target, page.encode("utf-8"))
    return target

"""Reading input files: what a file is, its rows in batches with exact row numbers, and the
rows it holds counted from the file itself.

- `files`: `InputFile` (format, size, checksum, a local CSV's records counted in the same
  pass), `RawTable` (a batch as read, with row numbers and the lines the reader skipped);
- `formats`: what a file holds whatever its name (`format_of`, `sniffed`), `describe`;
- `readers`: Parquet through polars' streaming reader and CSV through `csv_reader`, in
  batches or whole (`iter_batches`, `read_tables`), and what the footers say without reading
  rows (`row_estimate`, `heap_upper_bound`, `columns_of`);
- `csv_reader`: CSV in batches with exact row numbers, its bytes checked first (binary data,
  quotes left open, records too long); `starts`: a file's first bytes (`read_start`);
- `footers`, `footer_stats`: a Parquet footer's facts, integer maxima read from its own bytes;
- `csv_records`, `source_rows`: the rows each file holds, counted apart from the reader, and
  the check that the run read every one of them (`reconcile`).

Every function that may read a file twice in a run takes the run's `cache`
(`io.store.run_cache.RunCache`) explicitly; without one it reads again.
"""

from __future__ import annotations

from pipeline.io.lazy_exports import lazy_exports

_EXPORTS = {
    "InputFile": "files", "RawTable": "files", "Source": "files",
    "format_of": "formats", "describe": "formats",
    "iter_batches": "readers", "read_tables": "readers", "read_table": "readers",
    "row_estimate": "readers", "heap_upper_bound": "readers", "columns_of": "readers",
    "parquet_footer": "footers", "csv_batches": "csv_reader", "CsvRecords": "csv_records",
    "reconcile": "source_rows", "rows_in_source": "source_rows",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)  # each module loads when first asked for

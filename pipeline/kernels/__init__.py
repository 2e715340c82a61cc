"""Compiled numeric kernels on numpy arrays: no I/O, no polars.

Each module's loops are Cython compiled at install time (`_<module>.pyx`, built by setup.py
with gcc and OpenMP): nothing is compiled when a run starts. The modules here keep the
kernels' Python signatures and pass the compiled code the array dtypes it was built for.

Split by job, one module each:

* `tabulation`: SG tables of subtraction games with the period proof (`tabulate_subtraction`,
  `tabulate_many`);
* `lookups`: Grundy values in the flat table layout of `grundy.TableSet`, their XOR per
  position (`nim_sums_wide`), winning moves;
* `sorting`: key order: counting sorts (integer and text keys), runs, duplicates, ranks;
* `text`: lists of heaps and integer keys read from text cells;
* `csv_walk`: CSV bytes walked as pyarrow reads them: records, lines, open quotes;
* `threads`: the parallel kernels' thread count (`get_num_threads`, `set_num_threads`),
  small inputs on one thread (`threads_for`), whether kernels may run in two threads at once
  (`overlap_allowed`).

Callers use the package (`from pipeline import kernels; kernels.nim_sums_wide(...)`).
"""

# ruff: noqa: E402 - the compiled modules are checked before the modules that use them load
from pipeline.built import require_built

require_built(__name__, "_csv_walk", "_lookups", "_sorting", "_tabulation", "_text", "_threads")

from pipeline.kernels.csv_walk import CSV_IN_QUOTES, csv_records_part, csv_scan, csv_scan_part
from pipeline.kernels.lookups import (
    AHEAD_HEAPS,
    AHEAD_ROWS,
    BEYOND_TABLE,
    KIND_HALF,
    KIND_NIM,
    KIND_SUBTRACTION,
    half_sg,
    max_heap_per_table,
    nim_sums_wide,
    sg_of,
    sg_per_heap,
    winning_move,
    winning_moves_wide,
)
from pipeline.kernels.sorting import (
    adjacent_duplicates,
    counting_sort,
    counting_sort_parts,
    fill_runs,
    in_key_order,
    is_identity,
    key_runs,
    merge_int_runs,
    merge_text_runs,
    rank_in,
    run_counts,
    scatter,
    sorted_view_repeats,
    text_addresses,
    text_key_order,
    text_key_order_at,
    text_run_order,
)
from pipeline.kernels.tabulation import mix64, tabulate_many, tabulate_subtraction, window_power
from pipeline.kernels.text import heap_text_lists, int_text_values, needs_strip
from pipeline.kernels.threads import (
    get_num_threads,
    overlap_allowed,
    set_num_threads,
    threads_for,
)

__all__ = [
    "AHEAD_HEAPS", "AHEAD_ROWS", "BEYOND_TABLE", "CSV_IN_QUOTES", "KIND_HALF", "KIND_NIM",
    "KIND_SUBTRACTION",
    "adjacent_duplicates", "counting_sort", "counting_sort_parts", "csv_records_part",
    "csv_scan", "csv_scan_part",
    "fill_runs", "get_num_threads", "half_sg",
    "heap_text_lists", "in_key_order", "int_text_values", "is_identity", "key_runs",
    "max_heap_per_table", "merge_int_runs", "merge_text_runs", "mix64", "nim_sums_wide",
    "needs_strip", "overlap_allowed", "rank_in",
    "run_counts", "scatter", "set_num_threads", "sg_of", "sg_per_heap", "sorted_view_repeats",
    "tabulate_many", "tabulate_subtraction", "text_addresses", "text_key_order",
    "text_key_order_at", "text_run_order", "threads_for",
    "window_power", "winning_move", "winning_moves_wide",
]

"""Compiled numeric kernels (numba) on numpy arrays: no I/O, no polars.

Split by job, one module each:

* `tabulation`: SG tables of subtraction games with the period proof (`tabulate_subtraction`,
  `tabulate_many`);
* `lookups`: Grundy values in the flat table layout of `grundy.TableSet`, their XOR per
  position (`nim_sums_wide`), winning moves;
* `prefetch`: a cache prefetch hint, with which the lookups fetch table values ahead;
* `sorting`: key order: counting sorts (integer and text keys), runs, duplicates, ranks;
* `text`: lists of heaps and integer keys read from text cells;
* `csv_walk`: CSV bytes walked as pyarrow reads them: records, lines, open quotes;
* `threads`: whether kernels may run in two threads at once (`overlap_allowed`); numba's
  set-up started in a thread (`start_numba_meanwhile`); small inputs on one thread
  (`threads_for`).

Callers use the package (`from pipeline import kernels; kernels.nim_sums_wide(...)`); a kernel
that calls another imports it from its module, as numba compiles the call into the caller.
"""

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
    fill_runs,
    in_key_order,
    is_identity,
    key_runs,
    rank_in,
    run_counts,
    scatter,
    text_key_order,
)
from pipeline.kernels.tabulation import mix64, tabulate_many, tabulate_subtraction, window_power
from pipeline.kernels.text import heap_text_lists, int_text_values, needs_strip
from pipeline.kernels.threads import overlap_allowed, start_numba_meanwhile, threads_for

__all__ = [
    "AHEAD_HEAPS", "AHEAD_ROWS", "BEYOND_TABLE", "CSV_IN_QUOTES", "KIND_HALF", "KIND_NIM",
    "KIND_SUBTRACTION",
    "adjacent_duplicates", "counting_sort", "csv_records_part", "csv_scan", "csv_scan_part",
    "fill_runs", "half_sg",
    "heap_text_lists", "in_key_order", "int_text_values", "is_identity", "key_runs",
    "max_heap_per_table", "mix64", "nim_sums_wide", "needs_strip", "overlap_allowed", "rank_in",
    "run_counts", "scatter", "sg_of", "sg_per_heap", "start_numba_meanwhile", "tabulate_many",
    "tabulate_subtraction", "text_key_order", "threads_for", "window_power", "winning_move",
    "winning_moves_wide",
]

"""Time steps of a run in this process, on a dataset's own files: the sort of text
position ids (`kernels.text_key_order`), the Parquet footer walk (`footer_stats`) and the SG
lookups of wide positions (`kernels.nim_sums_wide`, on one thread and on all).

    python benchmarks/kernel_times.py text-sort benchmarks/data/m_uuid/positions
    python benchmarks/kernel_times.py footers '/tmp/manyp/positions/*.parquet'
    python benchmarks/kernel_times.py lookups benchmarks/data/m_int

Run it from two checkouts (`cd CHECKOUT && python .../kernel_times.py ...`), alternately, to
compare them: it imports `pipeline` from the current directory. text-sort checks its order
against polars' sort of (rule rank, position_id); footers reads at most 2,000 footers first,
then times only the walk; lookups reads a dataset's rules (subtraction only) and the first
2^20 of its Parquet positions, builds every table up to their largest heap, and checks the
nim-sums against numpy's XOR of the same table values. Prints the best of three, on stdout.
"""

from __future__ import annotations

import glob
import os
import sys
import time

sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pipeline import grundy, kernels  # noqa: E402
from pipeline.io.read import footer_stats  # noqa: E402
from pipeline.io.read.footers import _footer_bytes  # noqa: E402
from pipeline.transforms.buffers import text_buffers  # noqa: E402


def best_of_three(work) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def text_sort(positions: str) -> None:
    frame = pl.read_parquet(f"{positions}/*.parquet", columns=["rule_set_id", "position_id"])
    ids = frame["rule_set_id"].unique().sort()
    bucket = frame.select(pl.col("rule_set_id").cast(pl.Enum(ids.cast(pl.String)))
                          .to_physical())["rule_set_id"].to_numpy().astype(np.int32)
    offsets, data = text_buffers(frame["position_id"])
    kernels.text_key_order(bucket[:1000], ids.len(), offsets, data)  # load the kernel
    seconds = best_of_three(lambda: kernels.text_key_order(bucket, ids.len(), offsets, data))
    order, _ = kernels.text_key_order(bucket, ids.len(), offsets, data)
    expected = pl.DataFrame({"b": bucket, "p": frame["position_id"]}).with_row_index().sort(
        ["b", "p"], maintain_order=True)["index"].to_numpy()
    assert np.array_equal(order, expected), "the order differs from polars' sort"
    print(f"text_key_order: {frame.height:,} ids, {ids.len():,} rule sets: {seconds:.3f} s")


def footers(pattern: str) -> None:
    blobs = []
    for path in sorted(glob.glob(pattern))[:2000]:
        with pq.ParquetFile(path) as file:
            blobs.append(_footer_bytes(file.metadata))
    leaves = {i: (8, True) for i in range(4)}
    seconds = best_of_three(lambda: [footer_stats.integer_maxima(b, leaves) for b in blobs])
    print(f"footer walk: {len(blobs):,} footers of {np.mean([len(b) for b in blobs]):.0f} "
          f"bytes: {1e6 * seconds / len(blobs):.1f} us a footer")


def lookups(dataset: str) -> None:
    rules = pl.read_parquet(f"{dataset}/rules.parquet").sort("rule_set_id")
    if "kind" in rules.columns and (rules["kind"].fill_null("subtraction") != "subtraction").any():
        sys.exit("lookups: subtraction rules only (nim and half rules look nothing up)")
    frame = pl.read_parquet(f"{dataset}/positions/*.parquet", n_rows=1 << 20)
    if "heaps" not in frame.columns:
        sys.exit("lookups: wide-form positions only (a heaps column)")
    heaps = frame["heaps"]
    offsets = np.concatenate([[0], heaps.list.len().cum_sum().to_numpy()]).astype(np.int64)
    values = heaps.explode().drop_nulls().to_numpy().astype(np.int64)
    table = rules.with_row_index("t").join(frame.select("rule_set_id"), on="rule_set_id",
                                           how="right", maintain_order="right")["t"]
    if table.null_count() or values.shape[0] != offsets[-1] or (values < 0).any():
        sys.exit("lookups: every position needs a known rule set and heaps >= 0, none null")
    table_of_row = table.to_numpy().astype(np.int64)
    rule_of = [grundy.canonical_rule(None, m) for m in rules["moves"].to_list()]
    need = int(values.max()) + 1  # every table, up to the largest heap of these positions
    tables = grundy.TableSet.of(grundy.build_tables(rule_of, [need] * len(rule_of),
                                                    [need] * len(rule_of)))
    args = (offsets, values, table_of_row, *tables.lookup_args())
    nim, _ = kernels.nim_sums_wide(*args)  # load the kernel
    t = np.repeat(table_of_row, np.diff(offsets))
    pre, per = tables.pre[t], np.maximum(tables.per[t], 1)
    at = np.where(values < tables.length[t], values, pre + (values - pre) % per)
    prefix = np.concatenate([[0], np.bitwise_xor.accumulate(
        tables.values[tables.base[t] + at].astype(np.int64))])
    expected = prefix[offsets[1:]] ^ prefix[offsets[:-1]]  # empty lists: 0
    assert np.array_equal(nim, expected), "nim-sums differ from numpy's XOR"
    threads = kernels.get_num_threads()
    kernels.set_num_threads(1)
    one = best_of_three(lambda: kernels.nim_sums_wide(*args))
    kernels.set_num_threads(threads)
    every = best_of_three(lambda: kernels.nim_sums_wide(*args))
    print(f"nim_sums_wide: {frame.height:,} positions, {values.shape[0]:,} heaps, "
          f"{tables.values.nbytes / 2**20:.1f} MiB of tables: {one:.4f} s on one thread, "
          f"{every:.4f} s on {threads}")


if __name__ == "__main__":
    {"text-sort": text_sort, "footers": footers, "lookups": lookups}[sys.argv[1]](sys.argv[2])

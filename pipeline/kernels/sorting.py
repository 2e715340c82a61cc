"""Key order: counting sorts by a dense bucket (integer and text keys), permutations, runs
of equal keys, duplicate keys, and the rank of a key among sorted keys.

The kernels are compiled at install time (`_sorting.pyx`): row indices are passed as int32
or int64 (others converted), keys of any integer dtype as they are; comparisons are those of
the keys' own dtype, as before."""

from __future__ import annotations

import numpy as np

from pipeline.kernels import _sorting
from pipeline.kernels.threads import threads_for

_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                         np.uint16, np.uint32, np.uint64))


def _index(a) -> np.ndarray:
    """Row indices as the kernels take them: int32 or int64, contiguous."""
    a = np.asarray(a)
    if a.dtype in (np.int32, np.int64):
        return np.ascontiguousarray(a)
    return np.ascontiguousarray(a, np.int64)


def _key(a) -> np.ndarray:
    """Integer keys as they are (contiguous); booleans as uint8."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    if a.dtype not in _INTS:
        raise TypeError(f"integer keys expected, got {a.dtype}")
    return a


def _ordered64(a) -> np.ndarray:
    """Integer keys as int64 in the same order (uint64 with the top bit flipped)."""
    a = _key(a)
    if a.dtype == np.uint64:
        return (a ^ np.uint64(1 << 63)).view(np.int64)
    return np.ascontiguousarray(a, np.int64)


def _equal64(a) -> np.ndarray:
    """Integer keys as int64 that are equal exactly where the keys are."""
    a = _key(a)
    return a.view(np.int64) if a.dtype == np.uint64 else np.ascontiguousarray(a, np.int64)


def counting_sort(bucket, n_buckets, key, dest):
    """Sort rows by (bucket, key), stably: a counting sort on the dense bucket
    (0 <= bucket < n_buckets), then a merge sort of any bucket whose keys are not already
    ascending, so input in key order within each bucket costs O(n). `counting_sort_parts`
    of one part (int32 buckets, integer keys int64 holds).

    Fills `dest` (int32 or int64, int32 will do below 2^31 rows): row i goes to position
    dest[i]. Returns (sorted key, rows per bucket).
    """
    sorted_key, counts, _ = counting_sort_parts([bucket], n_buckets, [key], dest)
    return sorted_key, counts


def _signed(a) -> np.ndarray:
    """`_key`s whose values int64 holds as they are (no uint64)."""
    a = _key(a)
    if a.dtype == np.uint64:
        raise TypeError(f"integers that int64 holds expected, got {a.dtype}")
    return a


def counting_sort_parts(buckets, n_buckets, keys, dest):
    """`counting_sort` of the rows of several parts one after another, each part's int32
    buckets and int64 keys read where they are: no joined copy of either (a fresh array's
    every page is a page fault). Returns (sorted key, rows per bucket, whether two rows may
    share a bucket and key: False when each bucket's keys came strictly ascending, as the
    sort found them, so that no pass looks for repeats)."""
    buckets = [np.ascontiguousarray(_signed(b), np.int32) for b in buckets]
    keys = [np.ascontiguousarray(_signed(k), np.int64) for k in keys]
    sorted_key = np.empty(dest.shape[0], np.int64)
    counts = np.zeros(int(n_buckets), np.int64)
    may_repeat = _sorting.counting_sort_parts(buckets, keys, int(n_buckets), dest, sorted_key,
                                              counts)
    return sorted_key, counts, may_repeat


_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def scatter(values, dest):
    """out[dest[i]] = values[i] for a permutation `dest`, on all threads (values of any
    dtype of 1, 2, 4 or 8 bytes, moved as they are)."""
    values = np.ascontiguousarray(values)
    out = np.empty(values.shape[0], values.dtype)
    word = _WORDS[values.dtype.itemsize]
    _sorting.scatter(values.view(word), _index(dest), out.view(word))
    return out


def is_identity(order, start=0):
    """Whether order[i] == start + i for every i (a permutation that moves nothing; row
    numbers that follow one another from `start`)."""
    return _sorting.is_identity(_index(order), int(start))


def text_key_order(bucket, n_buckets, offsets, data):
    """The stable order of rows by (bucket, text), texts given as Arrow (offsets, bytes):
    a counting sort on the dense bucket that carries each text's first 8 bytes along (read
    in row order, so that the bytes are read once, front to back), then each bucket's rows
    sorted by those keys, and only runs tied on them by the bytes after, buckets in
    parallel, as polars orders strings. Reading the first bytes bucket by bucket instead,
    each a jump through the whole text, took three times as long on 10M UUIDs.
    Returns (order, rows per bucket), where order[j] is the row at sorted position j."""
    return _sorting.text_key_order(_index(bucket), int(n_buckets),
                                   np.ascontiguousarray(offsets, np.int64),
                                   np.ascontiguousarray(data, np.uint8))


def text_key_order_at(bucket, n_buckets, ptrs, lens):
    """`text_key_order` of texts left where they lie, given by each row's address and length
    (`text_addresses`): polars' string views are sorted without first copying every text
    into one buffer."""
    return _sorting.text_key_order_at(_index(bucket), int(n_buckets), ptrs, lens)


def text_addresses(pieces, rows):
    """(addresses, lengths, kept) of the texts of `pieces`, one after another: each piece
    ("views", views, buffers) in Arrow's string view layout (`_views.pxi`) or Arrow's
    (offsets, bytes). `kept` holds what the addresses point into; the caller keeps it, and
    the pieces' columns, alive while they are used."""
    ptrs = np.empty(rows, np.uint64)
    lens = np.empty(rows, np.int64)
    kept, base = [], 0
    for piece in pieces:
        if len(piece) == 3:
            views = np.ascontiguousarray(piece[1], np.int32)
            buffers = [np.ascontiguousarray(b, np.uint8) for b in piece[2]]
            _sorting.text_addresses(views, buffers, ptrs, lens, base)
            kept.append((views, buffers))
            base += views.shape[0]
        else:
            offsets = np.ascontiguousarray(piece[0], np.int64)
            data = np.ascontiguousarray(piece[1], np.uint8)
            _sorting.text_addresses_of(offsets, data, ptrs, lens, base)
            kept.append((offsets, data))
            base += offsets.shape[0] - 1
    if base != rows:
        raise ValueError("text_addresses: the pieces do not match the rows")
    return ptrs, lens, kept


def sorted_view_repeats(counts, views, buffers):
    """Which rows of texts sorted by (bucket, text), bucket b holding counts[b] rows, in
    Arrow's string view layout (views an (n, 4) int32 array, buffers the data buffers they
    point into), have the key of the row before or after them, on all threads."""
    return _sorting.sorted_view_repeats(
        np.ascontiguousarray(counts, np.int64), np.ascontiguousarray(views, np.int32),
        [np.ascontiguousarray(b, np.uint8) for b in buffers])


def merge_text_runs(runs, empty=None):
    """Merge k runs sorted by (bucket, text) as `text_key_order` sorts (bytes, then shorter
    first) into one. Run i is a list of segments (bucket, Arrow offsets, bytes) whose rows,
    one after another, are its rows (a run read in record batches need not be joined first);
    offsets are taken as they are (a slice's need not start at 0). A k-way merge (a loser
    tree of the runs' next rows, which keep their bucket and first 8 bytes at hand): O(n log
    k) comparisons, most of two integers, and the texts copied once, in order, where a sort
    of the rows one after another and a gather took as long again. Equal keys come out in
    run order, as a stable sort of the runs one after another puts them. Returns (bucket,
    offsets, data, order, repeats): the merged rows, order[j] the index of row j in all
    segments one after another, and how many rows equal the row before them. `empty(name, n,
    dtype)`, when given, supplies the returned arrays (a merge of slice after slice reuses its
    pages instead of faulting in fresh ones each time)."""
    empty = empty or _fresh
    runs = [[(np.ascontiguousarray(b, np.int32), np.ascontiguousarray(o, np.int64),
              np.ascontiguousarray(d, np.uint8)) for b, o, d in run] or
            [(np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.uint8))]
            for run in runs]
    n = sum(b.shape[0] for run in runs for b, _, _ in run)
    size = sum(int(o[-1] - o[0]) for run in runs for _, o, _ in run)
    bucket = empty("bucket", n, np.int32)
    offsets = empty("offsets", n + 1, np.int64)
    data = empty("data", size, np.uint8)
    order = empty("order", n, np.int64)
    repeats = _sorting.merge_text_runs(runs, bucket, offsets, data, order)
    return bucket, offsets, data, order, repeats


def merge_int_runs(runs, empty=None):
    """`merge_text_runs` for int64 keys, segments (bucket, key): (bucket, key, order,
    repeats)."""
    empty = empty or _fresh
    runs = [[(np.ascontiguousarray(b, np.int32), np.ascontiguousarray(k, np.int64))
             for b, k in run] or [(np.zeros(0, np.int32), np.zeros(0, np.int64))]
            for run in runs]
    n = sum(b.shape[0] for run in runs for b, _ in run)
    bucket = empty("bucket", n, np.int32)
    key = empty("key", n, np.int64)
    order = empty("order", n, np.int64)
    repeats = _sorting.merge_int_runs(runs, bucket, key, order)
    return bucket, key, order, repeats


def _fresh(name, n, dtype):
    return np.empty(n, dtype)


def _bucket_sums(bucket, n_buckets, weights=None, chunk=1 << 20):
    """`np.bincount(bucket, weights, minlength=n_buckets)` as int64, a chunk of rows at a time:
    bincount casts the whole of its input to intp (and weights to float64) first, arrays as
    large as the run's, of fresh pages each time."""
    out = np.zeros(int(n_buckets), np.int64)
    for start in range(0, bucket.shape[0], chunk):
        at = slice(start, start + chunk)
        out += np.bincount(bucket[at], None if weights is None else weights[at],
                           minlength=int(n_buckets)).astype(np.int64)
    return out


def text_run_order(bucket, n_buckets, lengths, pieces):
    """Rows sorted by (bucket, text) as `text_key_order` sorts them, the texts themselves
    moved into that order: each piece's texts (`pieces`: an iterator of the row pieces'
    Arrow (offsets, bytes), one after another, each let go once copied) go straight to
    their bucket's region, then every bucket is sorted within its region, buckets in
    parallel. Reading each text once in row order and sorting within regions that fit in
    cache, where `text_key_order` and a gather by its order read the whole text at random.
    A piece may also be ("views", views, buffers): Arrow's string view layout (views an
    (n, 4) int32 array, buffers the data buffers they point into), polars' own, read where
    it lies.
    `lengths`: each row's bytes, to size the regions up front. Returns (offsets, data,
    order, rows per bucket): the sorted texts, and order[j] the row at sorted position j
    (int32 below 2^31 rows: the order is allocated while the pieces are still held)."""
    bucket = np.ascontiguousarray(bucket, np.int32)
    n = bucket.shape[0]
    counts = _bucket_sums(bucket, n_buckets)
    sizes = _bucket_sums(bucket, n_buckets, lengths)
    del lengths  # the caller's, when passed as an expression: not held beside the texts
    first = np.zeros(counts.shape[0] + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    first_byte = np.zeros(counts.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=first_byte[1:])
    offsets = np.empty(n + 1, np.int64)
    data = np.empty(int(first_byte[-1]), np.uint8)
    order = np.empty(n, np.int32 if n < 2**31 else np.int64)
    row_fill, byte_fill = first[:-1].copy(), first_byte[:-1].copy()
    base = 0
    for piece in pieces:
        if len(piece) == 3:  # ("views", views, buffers): Arrow's string view layout
            views = np.ascontiguousarray(piece[1], np.int32)
            rows = views.shape[0]
            _sorting.scatter_text_views(bucket[base:base + rows], views,
                                        [np.ascontiguousarray(b, np.uint8) for b in piece[2]],
                                        row_fill, byte_fill, offsets, data, order, base)
            base += rows
            continue
        piece_offsets, piece_data = piece
        rows = piece_offsets.shape[0] - 1
        _sorting.scatter_text(bucket[base:base + rows],
                              np.ascontiguousarray(piece_offsets, np.int64),
                              np.ascontiguousarray(piece_data, np.uint8), row_fill, byte_fill,
                              offsets, data, order, base)
        base += rows
    if base != n or not np.array_equal(byte_fill, first_byte[1:]):
        raise ValueError("text_run_order: the pieces do not match the rows and lengths")
    offsets[n] = first_byte[-1]
    _sorting.sort_text_regions(first, offsets, data, order)
    return offsets, data, order, counts


def key_runs(counts, sorted_key):
    """Runs of equal keys in rows sorted by (bucket, key), where bucket b holds counts[b]
    rows: (offsets of the runs, n_runs + 1 of them; each run's bucket)."""
    sorted_key = _key(sorted_key)
    n = sorted_key.shape[0]
    starts = np.empty(n + 1, np.int64)
    run_bucket = np.empty(n, np.int64)
    runs = _sorting.key_runs(np.ascontiguousarray(counts, np.int64), sorted_key, starts,
                             run_bucket)
    return starts[:runs + 1].copy(), run_bucket[:runs].copy()


def fill_runs(out, values, counts):
    """out = values repeated counts times each (np.repeat into an existing array, the runs
    shared between the threads)."""
    _sorting.fill_runs(out, np.ascontiguousarray(values, out.dtype),
                       np.ascontiguousarray(counts, np.int64))


def run_counts(ids, nim):
    """Per run of equal `ids` (sorted ids: one run per id): (id, rows, rows with nim 0), each
    thread counting a chunk of the rows (a run that crosses chunks is counted once)."""
    nim = np.ascontiguousarray(nim)
    if nim.dtype not in _NIM_TYPES:  # the narrow types as they are: no 8-byte copy
        nim = nim.astype(np.int64)
    return _sorting.run_counts(_key(ids), nim)


_NIM_TYPES = (np.uint8, np.uint16, np.uint32, np.int64)


def adjacent_duplicates(a, b):
    """Rows of key-sorted (a, b) whose key equals a neighbour's: all copies of a repeated key
    (on all threads past `threads.PARALLEL_ROWS` rows)."""
    a, b = _equal64(a), _equal64(b)
    with threads_for(a.shape[0]):
        return _sorting.adjacent_duplicates(a, b)


def in_key_order(first, second):
    """Whether rows are sorted by (first, second): then every key's rows are contiguous."""
    first, second = _key(first), _key(second)
    if first.dtype != second.dtype:
        first, second = _ordered64(first), _ordered64(second)
    return _sorting.in_key_order(first, second)


def rank_in(values, keys):
    """Index of each value in the sorted distinct `keys`, -1 where absent: a direct table
    when the keys span a small range (the usual dense ids), else binary search."""
    return _sorting.rank_in(np.ascontiguousarray(values, np.int64),
                            np.ascontiguousarray(keys, np.int64))

"""Key order: counting sorts by a dense bucket (integer and text keys), permutations, runs
of equal keys, duplicate keys, and the rank of a key among sorted keys."""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def counting_sort(bucket, n_buckets, key, dest):
    """Sort rows by (bucket, key), stably: a counting sort on the dense bucket
    (0 <= bucket < n_buckets), then a merge sort of any bucket whose keys are not already
    ascending, so input in key order within each bucket costs O(n).

    Fills `dest` (int32 will do below 2^31 rows): row i goes to position dest[i]. Returns
    (sorted key, rows per bucket). The passes read rows in order and write n_buckets
    sequential streams, which caches well.
    """
    n = bucket.shape[0]
    counts = np.zeros(n_buckets, np.int64)
    for i in range(n):
        counts[bucket[i]] += 1
    fill = np.zeros(n_buckets, np.int64)
    for b in range(1, n_buckets):
        fill[b] = fill[b - 1] + counts[b - 1]
    sorted_key = np.empty(n, key.dtype)
    for i in range(n):
        b = bucket[i]
        j = fill[b]
        dest[i] = j
        sorted_key[j] = key[i]
        fill[b] = j + 1
    order = np.empty(0, np.int64)  # the inverse of dest, built once if a bucket needs it
    lo = 0
    for b in range(n_buckets):
        hi = lo + counts[b]
        ascending = True
        for j in range(lo + 1, hi):
            if sorted_key[j] < sorted_key[j - 1]:
                ascending = False
                break
        if not ascending:
            if order.shape[0] != n:
                order = np.empty(n, np.int64)
                for i in range(n):
                    order[dest[i]] = i
            segment = order[lo:hi].copy()
            within = np.argsort(sorted_key[lo:hi], kind="mergesort")
            for q in range(hi - lo):
                source = segment[within[q]]
                dest[source] = lo + q
                sorted_key[lo + q] = key[source]
        lo = hi
    return sorted_key, counts


@njit(cache=True, parallel=True, nogil=True)
def scatter(values, dest):
    """out[dest[i]] = values[i] for a permutation `dest`, on all threads."""
    out = np.empty(values.shape[0], values.dtype)
    for i in prange(values.shape[0]):
        out[dest[i]] = values[i]
    return out


@njit(cache=True)
def is_identity(order):
    for i in range(order.shape[0]):
        if order[i] != i:
            return False
    return True


@njit(cache=True, inline="always")
def _text_chunk(offsets, data, row, depth):
    """Bytes 8 * depth .. 8 * depth + 7 of text `row` as a big-endian integer (zeros past its
    end), so that integers compare as the bytes do."""
    start = offsets[row] + 8 * depth
    end = offsets[row + 1]
    key = np.uint64(0)
    for k in range(8):
        byte = np.uint64(data[start + k]) if start + k < end else np.uint64(0)
        key = (key << np.uint64(8)) | byte
    return key


@njit(cache=True, nogil=True)
def _split_ties(order, a, b, keys, within, offsets, depth, stack):
    """order[a:b], just sorted by `keys` (each text's bytes 8 * depth on; keys[within[q]] is
    the key of order[a + q]): each run of equal keys is pushed on `stack` to be sorted by
    the next 8 bytes or, when every text in it ends within these, put shorter first."""
    i = a
    while i < b:
        key = keys[within[i - a]]
        j = i + 1
        while j < b and keys[within[j - a]] == key:
            j += 1
        if j - i > 1:
            longer = False
            for r in range(i, j):
                if offsets[order[r] + 1] - offsets[order[r]] > 8 * (depth + 1):
                    longer = True
                    break
            if longer:
                stack.append((i, j, depth + 1))
            else:  # texts equal up to the shorter one's end: shorter first
                lengths = np.empty(j - i, np.int64)
                for r in range(i, j):
                    lengths[r - i] = offsets[order[r] + 1] - offsets[order[r]]
                by_length = np.argsort(lengths, kind="mergesort")
                tied = order[i:j].copy()
                for q in range(j - i):
                    order[i + q] = tied[by_length[q]]
        i = j


@njit(cache=True, nogil=True)
def _sort_texts(order, stack, offsets, data):
    """Sort each (lo, hi, depth) on `stack`, rows order[lo:hi] whose texts are equal before
    byte 8 * depth, by their bytes, stably: 8 bytes at a time, then only the runs still tied
    on the next 8; equal texts keep their order."""
    while len(stack):
        a, b, depth = stack.pop()
        keys = np.empty(b - a, np.uint64)
        for i in range(a, b):
            keys[i - a] = _text_chunk(offsets, data, order[i], depth)
        within = np.argsort(keys, kind="mergesort")
        rows = order[a:b].copy()
        for q in range(b - a):
            order[a + q] = rows[within[q]]
        _split_ties(order, a, b, keys, within, offsets, depth, stack)


@njit(cache=True, parallel=True, nogil=True)
def text_key_order(bucket, n_buckets, offsets, data):
    """The stable order of rows by (bucket, text), texts given as Arrow (offsets, bytes):
    a counting sort on the dense bucket that carries each text's first 8 bytes along (read
    in row order, so that the bytes are read once, front to back), then each bucket's rows
    sorted by those keys, and only runs tied on them by the bytes after (`_sort_texts`),
    buckets in parallel, as polars orders strings. Reading the first bytes bucket by bucket
    instead, each a jump through the whole text, took three times as long on 10M UUIDs.
    Returns (order, rows per bucket), where order[j] is the row at sorted position j."""
    n = bucket.shape[0]
    counts = np.zeros(n_buckets, np.int64)
    for i in range(n):
        counts[bucket[i]] += 1
    first = np.zeros(n_buckets + 1, np.int64)
    for b in range(n_buckets):
        first[b + 1] = first[b] + counts[b]
    fill = first[:-1].copy()
    order = np.empty(n, np.int64)
    keys = np.empty(n, np.uint64)
    for i in range(n):
        at = fill[bucket[i]]
        order[at] = i
        keys[at] = _text_chunk(offsets, data, i, 0)
        fill[bucket[i]] += 1
    for b in prange(n_buckets):
        a = first[b]
        e = first[b + 1]
        if e - a > 1:
            within = np.argsort(keys[a:e], kind="mergesort")
            order[a:e] = order[a:e][within]
            stack = [(a, a, 0)]  # typed as the (lo, hi, depth) it will hold, then emptied
            stack.pop()
            _split_ties(order, a, e, keys[a:e], within, offsets, 0, stack)
            _sort_texts(order, stack, offsets, data)
    return order, counts


@njit(cache=True, nogil=True)
def key_runs(counts, sorted_key):
    """Runs of equal keys in rows sorted by (bucket, key), where bucket b holds counts[b]
    rows: (offsets of the runs, n_runs + 1 of them; each run's bucket)."""
    n = sorted_key.shape[0]
    starts = np.empty(n + 1, np.int64)
    run_bucket = np.empty(n, np.int64)
    runs = 0
    lo = 0
    for b in range(counts.shape[0]):
        hi = lo + counts[b]
        for i in range(lo, hi):
            if i == lo or sorted_key[i] != sorted_key[i - 1]:
                starts[runs] = i
                run_bucket[runs] = b
                runs += 1
        lo = hi
    starts[runs] = n
    return starts[:runs + 1].copy(), run_bucket[:runs].copy()


@njit(cache=True, nogil=True)
def fill_runs(out, values, counts):
    """out = values repeated counts times each (np.repeat into an existing array)."""
    at = 0
    for b in range(counts.shape[0]):
        for _ in range(counts[b]):
            out[at] = values[b]
            at += 1


@njit(cache=True, nogil=True)
def run_counts(ids, nim):
    """Per run of equal `ids` (sorted ids: one run per id): (id, rows, rows with nim 0)."""
    n = ids.shape[0]
    runs = 1 if n else 0
    for i in range(1, n):
        if ids[i] != ids[i - 1]:
            runs += 1
    run_ids = np.empty(runs, np.int64)
    sizes = np.zeros(runs, np.int64)
    losing = np.zeros(runs, np.int64)
    r = -1
    for i in range(n):
        if i == 0 or ids[i] != ids[i - 1]:
            r += 1
            run_ids[r] = ids[i]
        sizes[r] += 1
        if nim[i] == 0:
            losing[r] += 1
    return run_ids, sizes, losing


@njit(cache=True)
def adjacent_duplicates(a, b):
    """Rows of key-sorted (a, b) whose key equals a neighbour's: all copies of a repeated key."""
    n = a.shape[0]
    out = np.zeros(n, np.bool_)
    for i in range(1, n):
        if a[i] == a[i - 1] and b[i] == b[i - 1]:
            out[i] = True
            out[i - 1] = True
    return out


@njit(cache=True, nogil=True)
def in_key_order(first, second):
    """Whether rows are sorted by (first, second): then every key's rows are contiguous."""
    for i in range(1, first.shape[0]):
        if first[i] < first[i - 1] or first[i] == first[i - 1] and second[i] < second[i - 1]:
            return False
    return True


@njit(cache=True, nogil=True)
def rank_in(values, keys):
    """Index of each value in the sorted distinct `keys`, -1 where absent: a direct table
    when the keys span a small range (the usual dense ids), else binary search."""
    n = values.shape[0]
    out = np.full(n, -1, np.int64)
    if keys.shape[0] == 0:
        return out
    lo = keys[0]
    width = keys[keys.shape[0] - 1] - lo  # wraps negative when the keys span 2^63 or more
    if 0 <= width < max(1 << 22, 4 * keys.shape[0]):
        span = width + 1
        table = np.full(span, -1, np.int64)
        for i in range(keys.shape[0]):
            table[keys[i] - lo] = i
        for j in range(n):
            d = values[j] - lo  # meaningful only for values >= lo (else it may wrap)
            if values[j] >= lo and 0 <= d < span:
                out[j] = table[d]
        return out
    found = np.searchsorted(keys, values)
    for j in range(n):
        if found[j] < keys.shape[0] and keys[found[j]] == values[j]:
            out[j] = found[j]
    return out

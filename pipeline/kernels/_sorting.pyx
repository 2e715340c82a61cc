# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of `sorting` (see there). Row indices (buckets, destinations) are int32 or
int64, keys any integer dtype; outputs are allocated by the caller where their dtype follows
an input's."""

include "_common.pxi"
include "_argsort.pxi"
include "_views.pxi"

from cython.parallel cimport prange
cimport openmp
from libc.stdlib cimport calloc
from libc.stdint cimport uintptr_t
from libc.string cimport memcmp, memcpy

import numpy as np

ctypedef fused idx_t:
    int32_t
    int64_t

ctypedef fused dest_t:
    int32_t
    int64_t

ctypedef fused word_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t


def counting_sort_parts(list buckets, list keys, int64_t n_buckets, dest_t[::1] dest,
                        int64_t[::1] sorted_key, int64_t[::1] counts):
    """`counting_sort` of the rows of several parts one after another (int32 buckets, int64
    keys), read where they are: no joined copy of either. Returns whether two rows may share
    a (bucket, key): False when every bucket's keys were strictly ascending."""
    cdef Py_ssize_t parts = len(buckets)
    cdef int64_t n = dest.shape[0]
    cdef int64_t i, b, j, k, c, a, e, lo, hi, total
    cdef int status
    cdef int64_t* at
    cdef const int32_t* bucket_of
    cdef const int64_t* key_of
    cdef const int32_t[::1] one_bucket
    cdef const int64_t[::1] one_key
    if len(keys) != parts or sorted_key.shape[0] != n or counts.shape[0] != n_buckets:
        raise ValueError("counting_sort_parts: parts or outputs do not match")
    cdef int64_t chunks = max(1, min(<int64_t>openmp.omp_get_max_threads(), n // 65536))
    cdef int64_t* starts = <int64_t*>malloc((parts + 1) * sizeof(int64_t))
    cdef const int32_t** bucket_parts = <const int32_t**>malloc(max(parts, 1) * sizeof(void*))
    cdef const int64_t** key_parts = <const int64_t**>malloc(max(parts, 1) * sizeof(void*))
    cdef int64_t* fill = <int64_t*>calloc(max(n_buckets, 1) * chunks, sizeof(int64_t))
    cdef uint8_t* outside = <uint8_t*>calloc(chunks, 1)  # per chunk: a bucket out of range
    cdef int failed = 0
    if (starts == NULL or bucket_parts == NULL or key_parts == NULL or fill == NULL
            or outside == NULL):
        free(starts)
        free(bucket_parts)
        free(key_parts)
        free(fill)
        free(outside)
        raise MemoryError()
    starts[0] = 0
    try:
        for k in range(parts):  # the lists hold the arrays: their buffers outlive this call
            one_bucket = buckets[k]
            one_key = keys[k]
            if one_key.shape[0] != one_bucket.shape[0]:
                raise ValueError("counting_sort_parts: a part's buckets and keys differ")
            bucket_parts[k] = &one_bucket[0] if one_bucket.shape[0] else NULL
            key_parts[k] = &one_key[0] if one_key.shape[0] else NULL
            starts[k + 1] = starts[k] + one_bucket.shape[0]
        if starts[parts] != n:
            raise ValueError("counting_sort_parts: the parts' rows and dest differ")
        with nogil:
            for c in prange(chunks, schedule="static", num_threads=chunks):
                at = fill + c * n_buckets
                lo = n * c // chunks
                hi = n * (c + 1) // chunks
                k = _part_at(starts, parts, lo)
                while k < parts and starts[k] < hi:
                    a = max(lo, starts[k]) - starts[k]
                    e = min(hi, starts[k + 1]) - starts[k]
                    bucket_of = bucket_parts[k]
                    for i in range(a, e):
                        b = bucket_of[i]
                        if b < 0 or b >= n_buckets:
                            outside[c] = 1
                        else:
                            at[b] += 1
                    k = k + 1
            for c in range(chunks):
                if outside[c]:
                    failed = 1
        if failed:
            raise ValueError("counting_sort_parts: a bucket outside 0 .. n_buckets - 1")
        with nogil:
            total = 0
            for b in range(n_buckets):
                for c in range(chunks):
                    j = fill[c * n_buckets + b]
                    fill[c * n_buckets + b] = total
                    total = total + j
                counts[b] = total - fill[b]
            for c in prange(chunks, schedule="static", num_threads=chunks):
                at = fill + c * n_buckets
                lo = n * c // chunks
                hi = n * (c + 1) // chunks
                k = _part_at(starts, parts, lo)
                while k < parts and starts[k] < hi:
                    a = max(lo, starts[k]) - starts[k]
                    e = min(hi, starts[k + 1]) - starts[k]
                    bucket_of = bucket_parts[k]
                    key_of = key_parts[k]
                    for i in range(a, e):
                        b = bucket_of[i]
                        j = at[b]
                        dest[starts[k] + i] = <dest_t>j
                        sorted_key[j] = key_of[i]
                        at[b] = j + 1
                    k = k + 1
    finally:
        free(starts)
        free(bucket_parts)
        free(key_parts)
        free(fill)
        free(outside)
    cdef dest_t* dest_at = &dest[0] if n else NULL
    cdef int64_t* key_at = &sorted_key[0] if n else NULL
    cdef int64_t* counts_at = &counts[0] if n_buckets else NULL
    with nogil:
        status = _sort_within_buckets(n, n_buckets, dest_at, key_at, counts_at)
    if status < 0:
        raise MemoryError()
    return status == 1


cdef inline int64_t _part_at(const int64_t* starts, int64_t parts, int64_t row) noexcept nogil:
    """The part that holds row `row` of the parts one after another (`starts`: each part's
    first row, then the total); `parts` when past the end."""
    cdef int64_t k = 0
    while k < parts and starts[k + 1] <= row:
        k = k + 1
    return k


cdef int _sort_within_buckets(int64_t n, int64_t n_buckets, dest_t* dest, int64_t* sorted_key,
                              const int64_t* counts) noexcept nogil:
    """After a stable scatter by bucket: each bucket whose keys are not ascending sorted
    stably by key, moving its rows' destinations with them. Which buckets need it is found
    on all threads; a bucket's rows sorted from a copy of its keys (no input key read
    again). -1 when out of memory; else 1 when a bucket was sorted or holds a key twice
    (rows may share a key), 0 when every bucket's keys were strictly ascending."""
    cdef int64_t b, j, q, lo, hi, source, longest = 0, unsorted = 0
    cdef int64_t* first = <int64_t*>malloc((max(n_buckets, 1) + 1) * sizeof(int64_t))
    cdef uint8_t* out_of_order = <uint8_t*>calloc(max(n_buckets, 1), 1)  # 2: a key repeats
    cdef int64_t* order = NULL  # the inverse of dest
    cdef int64_t* segment = NULL
    cdef int64_t* within = NULL
    cdef int64_t* copied = NULL
    cdef int status = 0
    if first == NULL or out_of_order == NULL:
        free(first)
        free(out_of_order)
        return -1
    first[0] = 0
    for b in range(n_buckets):
        first[b + 1] = first[b] + counts[b]
    for b in prange(n_buckets, schedule="dynamic", chunksize=16):
        for j in range(first[b] + 1, first[b + 1]):
            if sorted_key[j] < sorted_key[j - 1]:
                out_of_order[b] = 1
                break
            if sorted_key[j] == sorted_key[j - 1]:
                out_of_order[b] = 2  # stays 2 unless a later key is out of order
    for b in range(n_buckets):
        if out_of_order[b] == 2:
            status = 1
        elif out_of_order[b]:
            status = 1
            unsorted = unsorted + 1
            longest = max(longest, counts[b])
    if unsorted:
        order = <int64_t*>malloc(max(n, 1) * sizeof(int64_t))
        segment = <int64_t*>malloc(longest * sizeof(int64_t))
        within = <int64_t*>malloc(longest * sizeof(int64_t))
        copied = <int64_t*>malloc(longest * sizeof(int64_t))
        if order == NULL or segment == NULL or within == NULL or copied == NULL:
            status = -1
        else:
            for j in prange(n, schedule="static"):
                order[dest[j]] = j
            for b in range(n_buckets):
                if out_of_order[b] != 1:
                    continue
                lo = first[b]
                hi = first[b + 1]
                for q in range(hi - lo):
                    segment[q] = order[lo + q]
                    copied[q] = sorted_key[lo + q]
                if stable_argsort(copied, hi - lo, within) < 0:
                    status = -1
                    break
                for q in range(hi - lo):
                    source = segment[within[q]]
                    dest[source] = <dest_t>(lo + q)
                    sorted_key[lo + q] = copied[within[q]]
    free(first)
    free(out_of_order)
    free(order)
    free(segment)
    free(within)
    free(copied)
    return status


def scatter(const word_t[::1] values, const idx_t[::1] dest, word_t[::1] out):
    cdef Py_ssize_t i
    for i in prange(values.shape[0], nogil=True, schedule="static"):
        out[dest[i]] = values[i]


def is_identity(const idx_t[::1] order, int64_t start=0):
    cdef Py_ssize_t i
    for i in range(order.shape[0]):
        if order[i] != start + i:
            return False
    return True


cdef inline uint64_t _bytes_key(const uint8_t* text, int64_t length, int64_t depth
                               ) noexcept nogil:
    """Bytes 8 * depth .. 8 * depth + 7 of a text as a big-endian integer (zeros past its
    end), so that integers compare as the bytes do."""
    cdef int64_t start = 8 * depth
    cdef uint64_t key = 0
    cdef uint64_t byte
    cdef int k
    for k in range(8):
        byte = <uint64_t>text[start + k] if start + k < length else 0
        key = (key << 8) | byte
    return key


cdef inline uint64_t _text_chunk(const int64_t* offsets, const uint8_t* data, int64_t row,
                                 int64_t depth) noexcept nogil:
    """`_bytes_key` of text `row` of Arrow's (offsets, bytes)."""
    return _bytes_key(data + offsets[row], offsets[row + 1] - offsets[row], depth)


# Rows' texts, either Arrow's (offsets, bytes) or, when `ptrs` is set, each row's address and
# length (`text_addresses`: texts left where they lie, as polars' string views hold them).
cdef struct Texts:
    const int64_t* offsets
    const uint8_t* data
    const uint64_t* ptrs
    const int64_t* lens


cdef inline int64_t _length(const Texts* t, int64_t row) noexcept nogil:
    if t.ptrs != NULL:
        return t.lens[row]
    return t.offsets[row + 1] - t.offsets[row]


cdef inline const uint8_t* _start(const Texts* t, int64_t row) noexcept nogil:
    if t.ptrs != NULL:
        return <const uint8_t*><uintptr_t>t.ptrs[row]
    return t.data + t.offsets[row]


cdef inline uint64_t _chunk(const Texts* t, int64_t row, int64_t depth) noexcept nogil:
    """`_bytes_key` of text `row` in either layout."""
    return _bytes_key(_start(t, row), _length(t, row), depth)


cdef struct Stack:
    int64_t* items  # (lo, hi, depth) triples
    int64_t n
    int64_t cap


cdef int _push(Stack* stack, int64_t lo, int64_t hi, int64_t depth) noexcept nogil:
    cdef int64_t* grown
    if stack.n + 3 > stack.cap:
        grown = <int64_t*>realloc(stack.items, max(2 * stack.cap, 48) * sizeof(int64_t))
        if grown == NULL:
            return -1
        stack.items = grown
        stack.cap = max(2 * stack.cap, 48)
    stack.items[stack.n] = lo
    stack.items[stack.n + 1] = hi
    stack.items[stack.n + 2] = depth
    stack.n += 3
    return 0


cdef int _reorder(int64_t* order, int64_t a, int64_t b, const int64_t* within) noexcept nogil:
    """order[a:b] = order[a:b][within]."""
    cdef int64_t q
    cdef int64_t* rows = <int64_t*>malloc(max(b - a, 1) * sizeof(int64_t))
    if rows == NULL:
        return -1
    for q in range(b - a):
        rows[q] = order[a + q]
    for q in range(b - a):
        order[a + q] = rows[within[q]]
    free(rows)
    return 0


cdef int _split_ties(int64_t* order, int64_t a, int64_t b, const uint64_t* keys,
                     const int64_t* within, const Texts* texts, int64_t depth,
                     Stack* stack) noexcept nogil:
    """order[a:b], just sorted by `keys` (each text's bytes 8 * depth on; keys[within[q]] is
    the key of order[a + q]): each run of equal keys is pushed on `stack` to be sorted by
    the next 8 bytes or, when every text in it ends within these, put shorter first."""
    cdef int64_t i = a
    cdef int64_t j, r
    cdef uint64_t key
    cdef bint longer
    cdef int64_t* lengths
    cdef int64_t* by_length
    cdef int status
    while i < b:
        key = keys[within[i - a]]
        j = i + 1
        while j < b and keys[within[j - a]] == key:
            j += 1
        if j - i > 1:
            longer = False
            for r in range(i, j):
                if _length(texts, order[r]) > 8 * (depth + 1):
                    longer = True
                    break
            if longer:
                if _push(stack, i, j, depth + 1) < 0:
                    return -1
            else:  # texts equal up to the shorter one's end: shorter first
                lengths = <int64_t*>malloc((j - i) * sizeof(int64_t))
                by_length = <int64_t*>malloc((j - i) * sizeof(int64_t))
                if lengths == NULL or by_length == NULL:
                    free(lengths)
                    free(by_length)
                    return -1
                for r in range(i, j):
                    lengths[r - i] = _length(texts, order[r])
                status = stable_argsort(lengths, j - i, by_length)
                if status == 0:
                    status = _reorder(order, i, j, by_length)
                free(lengths)
                free(by_length)
                if status < 0:
                    return -1
        i = j
    return 0


cdef int _sort_texts(int64_t* order, Stack* stack, const Texts* texts) noexcept nogil:
    """Sort each (lo, hi, depth) on `stack`, rows order[lo:hi] whose texts are equal before
    byte 8 * depth, by their bytes, stably: 8 bytes at a time, then only the runs still tied
    on the next 8; equal texts keep their order."""
    cdef int64_t a, b, depth, i
    cdef uint64_t* keys
    cdef int64_t* within
    cdef int status
    while stack.n:
        stack.n -= 3
        a = stack.items[stack.n]
        b = stack.items[stack.n + 1]
        depth = stack.items[stack.n + 2]
        keys = <uint64_t*>malloc((b - a) * sizeof(uint64_t))
        within = <int64_t*>malloc((b - a) * sizeof(int64_t))
        if keys == NULL or within == NULL:
            free(keys)
            free(within)
            return -1
        for i in range(a, b):
            keys[i - a] = _chunk(texts, order[i], depth)
        status = stable_argsort(keys, b - a, within)
        if status == 0:
            status = _reorder(order, a, b, within)
        if status == 0:
            status = _split_ties(order, a, b, keys, within, texts, depth, stack)
        free(keys)
        free(within)
        if status < 0:
            return -1
    return 0


cdef int _sort_bucket(int64_t* order, const uint64_t* keys, int64_t a, int64_t e,
                      const Texts* texts) noexcept nogil:
    cdef Stack stack
    cdef int status
    cdef int64_t* within
    if e - a <= 1:
        return 0
    within = <int64_t*>malloc((e - a) * sizeof(int64_t))
    if within == NULL:
        return -1
    stack.items = NULL
    stack.n = 0
    stack.cap = 0
    status = stable_argsort(&keys[a], e - a, within)
    if status == 0:
        status = _reorder(order, a, e, within)
    if status == 0:
        status = _split_ties(order, a, e, &keys[a], within, texts, 0, &stack)
    if status == 0:
        status = _sort_texts(order, &stack, texts)
    free(within)
    free(stack.items)
    return status


def text_key_order(const idx_t[::1] bucket, int64_t n_buckets, const int64_t[::1] offsets,
                   const uint8_t[::1] data):
    cdef Texts texts
    texts.offsets = &offsets[0]
    texts.data = &data[0] if data.shape[0] else NULL
    texts.ptrs = NULL
    texts.lens = NULL
    return _key_order(bucket, n_buckets, &texts)


def text_key_order_at(const idx_t[::1] bucket, int64_t n_buckets, const uint64_t[::1] ptrs,
                      const int64_t[::1] lens):
    """`text_key_order` of texts given by address and length (`text_addresses`)."""
    cdef Texts texts
    if ptrs.shape[0] != bucket.shape[0] or lens.shape[0] != bucket.shape[0]:
        raise ValueError("text_key_order_at: addresses do not match the rows")
    texts.offsets = NULL
    texts.data = NULL
    texts.ptrs = &ptrs[0] if ptrs.shape[0] else NULL
    texts.lens = &lens[0] if lens.shape[0] else NULL
    if texts.ptrs == NULL:
        return np.empty(0, np.int64), np.zeros(n_buckets, np.int64)
    return _key_order(bucket, n_buckets, &texts)


cdef _key_order(const idx_t[::1] bucket, int64_t n_buckets, const Texts* texts):
    cdef Py_ssize_t n = bucket.shape[0]
    counts_arr = np.zeros(n_buckets, np.int64)
    order_arr = np.empty(n, np.int64)
    cdef int64_t[::1] counts = counts_arr
    cdef int64_t[::1] order = order_arr
    first_arr = np.zeros(n_buckets + 1, np.int64)
    cdef int64_t[::1] first = first_arr
    keys_arr = np.empty(n, np.uint64)
    cdef uint64_t[::1] keys = keys_arr
    cdef int64_t[::1] failed = np.zeros(max(n_buckets, 1), np.int64)
    cdef int64_t i, j, c, total
    cdef int64_t* at
    cdef Py_ssize_t b
    cdef int64_t* op = &order[0]
    cdef uint64_t* kp = &keys[0]
    # the rows in one contiguous chunk per thread, as `counting_sort`: each counts its
    # chunk's buckets, then places its rows (and their texts' first 8 bytes) from where the
    # chunks before it left each bucket (stable)
    cdef int64_t chunks = max(1, min(<int64_t>openmp.omp_get_max_threads(), n // 65536))
    cdef int64_t* fill = <int64_t*>calloc(max(n_buckets, 1) * chunks, sizeof(int64_t))
    if fill == NULL:
        raise MemoryError()
    with nogil:
        for c in prange(chunks, schedule="static", num_threads=chunks):
            at = fill + c * n_buckets
            for i in range(n * c // chunks, n * (c + 1) // chunks):
                at[bucket[i]] += 1
        total = 0
        for b in range(n_buckets):
            first[b] = total
            for c in range(chunks):
                j = fill[c * n_buckets + b]
                fill[c * n_buckets + b] = total
                total = total + j
            counts[b] = total - first[b]
        first[n_buckets] = total
        for c in prange(chunks, schedule="static", num_threads=chunks):
            at = fill + c * n_buckets
            for i in range(n * c // chunks, n * (c + 1) // chunks):
                j = at[bucket[i]]
                op[j] = i
                kp[j] = _chunk(texts, i, 0)
                at[bucket[i]] = j + 1
    free(fill)
    for b in prange(n_buckets, nogil=True, schedule="dynamic"):
        failed[b] = _sort_bucket(op, kp, first[b], first[b + 1], texts)
    if n_buckets and np.asarray(failed).min() < 0:
        raise MemoryError("text_key_order: out of memory")
    return order_arr, counts_arr


def text_addresses(const int32_t[:, ::1] views, list buffers, uint64_t[::1] ptrs,
                   int64_t[::1] lens, int64_t base):
    """Rows base.. of `ptrs` and `lens`: the address and length of each text of a piece in
    Arrow's string view layout (`_views.pxi`), where it lies: inline in its view when at most
    12 bytes, else in its data buffer. The views and buffers must outlive the addresses."""
    cdef Py_ssize_t n = views.shape[0]
    cdef Py_ssize_t i
    cdef int64_t length
    cdef const uint8_t** data
    if views.shape[1] != 4 or base < 0 or base + n > ptrs.shape[0] or \
            ptrs.shape[0] != lens.shape[0]:
        raise ValueError("text_addresses: views do not match the rows")
    data = _view_buffers(views, buffers, "text_addresses")
    with nogil:
        for i in range(n):
            length = views[i, 0]
            lens[base + i] = length
            if length > 12:
                ptrs[base + i] = <uint64_t><uintptr_t>(data[views[i, 2]] + <uint32_t>views[i, 3])
            else:
                ptrs[base + i] = <uint64_t><uintptr_t>&views[i, 1]
    free(data)


def text_addresses_of(const int64_t[::1] offsets, const uint8_t[::1] data, uint64_t[::1] ptrs,
                      int64_t[::1] lens, int64_t base):
    """`text_addresses` of a piece as Arrow's (offsets, bytes)."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef Py_ssize_t i
    cdef uint64_t at
    if n < 0 or base < 0 or base + n > ptrs.shape[0] or ptrs.shape[0] != lens.shape[0] or \
            (n and (offsets[0] < 0 or offsets[n] > data.shape[0])):
        raise ValueError("text_addresses_of: offsets do not match the rows")
    at = <uint64_t><uintptr_t>&data[0] if data.shape[0] else 0
    with nogil:
        for i in range(n):
            ptrs[base + i] = at + offsets[i]
            lens[base + i] = offsets[i + 1] - offsets[i]


def sorted_view_repeats(const int64_t[::1] counts, const int32_t[:, ::1] views, list buffers):
    """For texts sorted by (bucket, text) in Arrow's string view layout (`_views.pxi`),
    bucket b holding counts[b] rows: whether row j's key is also row j-1's or j+1's. Read in
    order; a text's bytes only when its length and 4-byte prefix match its neighbour's."""
    cdef Py_ssize_t n = views.shape[0]
    cdef Py_ssize_t j, b
    cdef int64_t at = 0
    cdef const uint8_t** data
    same_arr = np.zeros(n + 1, np.uint8)
    starts_arr = np.zeros(n + 1, np.uint8)
    cdef uint8_t[::1] same = same_arr
    cdef uint8_t[::1] starts = starts_arr
    if n and views.shape[1] != 4:
        raise ValueError("sorted_view_repeats: views are not (n, 4)")
    for b in range(counts.shape[0]):
        if at < n:
            starts[at] = 1
        at += counts[b]
    if at != n:
        raise ValueError("sorted_view_repeats: counts do not match the rows")
    data = _view_buffers(views, buffers, "sorted_view_repeats")
    for j in prange(1, n, nogil=True, schedule="static"):
        if starts[j] or views[j, 0] != views[j - 1, 0] or views[j, 1] != views[j - 1, 1]:
            continue
        if views[j, 0] <= 12:  # inline, zero-padded: the view is the text
            if views[j, 2] == views[j - 1, 2] and views[j, 3] == views[j - 1, 3]:
                same[j] = 1
        elif memcmp(data[views[j, 2]] + <uint32_t>views[j, 3],
                    data[views[j - 1, 2]] + <uint32_t>views[j - 1, 3],
                    <size_t>views[j, 0]) == 0:
            same[j] = 1
    free(data)
    repeated = same_arr[:n].astype(np.bool_)
    repeated[:-1] |= same_arr[1:n].astype(np.bool_)
    return repeated


def key_runs(const int64_t[::1] counts, const any_int[::1] sorted_key, int64_t[::1] starts,
             int64_t[::1] run_bucket):
    """Fills starts (n + 1) and run_bucket (n); returns the number of runs."""
    cdef Py_ssize_t n = sorted_key.shape[0]
    cdef int64_t runs = 0
    cdef int64_t lo = 0
    cdef int64_t hi, i
    cdef Py_ssize_t b
    with nogil:
        for b in range(counts.shape[0]):
            hi = lo + counts[b]
            for i in range(lo, hi):
                if i == lo or sorted_key[i] != sorted_key[i - 1]:
                    starts[runs] = i
                    run_bucket[runs] = b
                    runs += 1
            lo = hi
        starts[runs] = n
    return runs


def fill_runs(any_int[::1] out, const any_int[::1] values, const int64_t[::1] counts):
    cdef Py_ssize_t nb = counts.shape[0]
    cdef Py_ssize_t b
    cdef int64_t k, at
    starts_arr = np.zeros(nb + 1, np.int64)
    cdef int64_t[::1] starts = starts_arr
    for b in range(nb):
        if counts[b] < 0:
            raise ValueError("fill_runs: a negative count")
        starts[b + 1] = starts[b] + counts[b]
    if starts[nb] > out.shape[0]:
        raise ValueError("fill_runs: the runs overrun the output")
    for b in prange(nb, nogil=True, schedule="dynamic", chunksize=16):
        at = starts[b]
        for k in range(counts[b]):
            out[at + k] = values[b]


ctypedef fused nim_int:  # nim sums as the verdicts hold them (narrow), or int64
    uint8_t
    uint16_t
    uint32_t
    int64_t


cdef int64_t _run_starts(const any_int[::1] ids, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """How many runs of equal ids start in rows lo .. hi."""
    cdef int64_t found = 0
    cdef Py_ssize_t i
    for i in range(lo, hi):
        if i == 0 or ids[i] != ids[i - 1]:
            found = found + 1
    return found


cdef void _fill_run_counts(const any_int[::1] ids, const nim_int[::1] nim, Py_ssize_t lo,
                           Py_ssize_t hi, int64_t r, int64_t* run_ids, int64_t* sizes,
                           int64_t* losing, int64_t* carry) noexcept nogil:
    """Rows lo .. hi counted into runs r + 1, r + 2, ... (those starting there); rows before
    the first start continue run r, an earlier chunk's: counted into `carry` (rows, losing)."""
    cdef int64_t rows = 0
    cdef int64_t lost = 0
    cdef int64_t at = r
    cdef Py_ssize_t i
    for i in range(lo, hi):
        if i == 0 or ids[i] != ids[i - 1]:
            if at == r:
                carry[0], carry[1] = rows, lost
            else:
                sizes[at], losing[at] = rows, lost
            at = at + 1
            run_ids[at] = <int64_t>ids[i]
            rows, lost = 0, 0
        rows = rows + 1
        if nim[i] == 0:
            lost = lost + 1
    if at == r:
        carry[0], carry[1] = rows, lost
    else:
        sizes[at], losing[at] = rows, lost


def run_counts(const any_int[::1] ids, const nim_int[::1] nim):
    # each thread takes a contiguous chunk of rows: it counts the runs that start there, then
    # fills them from where the chunks before it left off; rows before its first start
    # continue a run of an earlier chunk, and are added to it once all are done
    cdef Py_ssize_t n = ids.shape[0]
    cdef int64_t chunks = max(1, min(<int64_t>openmp.omp_get_max_threads(), n // 65536))
    cdef int64_t c, total
    cdef int64_t[::1] first = np.zeros(chunks + 1, np.int64)
    cdef int64_t[:, ::1] carry = np.zeros((chunks, 2), np.int64)
    for c in prange(chunks, nogil=True, schedule="static", num_threads=chunks):
        first[c + 1] = _run_starts(ids, n * c // chunks, n * (c + 1) // chunks)
    total = 0
    for c in range(chunks + 1):
        total = total + first[c]
        first[c] = total
    run_ids_arr = np.empty(total, np.int64)
    sizes_arr = np.zeros(total, np.int64)
    losing_arr = np.zeros(total, np.int64)
    cdef int64_t[::1] run_ids = run_ids_arr
    cdef int64_t[::1] sizes = sizes_arr
    cdef int64_t[::1] losing = losing_arr
    if total == 0:
        return run_ids_arr, sizes_arr, losing_arr
    for c in prange(chunks, nogil=True, schedule="static", num_threads=chunks):
        _fill_run_counts(ids, nim, n * c // chunks, n * (c + 1) // chunks, first[c] - 1,
                         &run_ids[0], &sizes[0], &losing[0], &carry[c, 0])
    for c in range(1, chunks):
        sizes[first[c] - 1] += carry[c, 0]
        losing[first[c] - 1] += carry[c, 1]
    return run_ids_arr, sizes_arr, losing_arr


def adjacent_duplicates(const int64_t[::1] a, const int64_t[::1] b):
    cdef Py_ssize_t n = a.shape[0]
    if b.shape[0] != n:
        raise ValueError("adjacent_duplicates: the columns differ in length")
    out_arr = np.empty(n, np.bool_)
    cdef uint8_t[::1] out = out_arr.view(np.uint8)
    cdef Py_ssize_t i
    for i in prange(n, nogil=True, schedule="static"):  # each row's own flag: no shared write
        out[i] = ((i > 0 and a[i] == a[i - 1] and b[i] == b[i - 1])
                  or (i + 1 < n and a[i] == a[i + 1] and b[i] == b[i + 1]))
    return out_arr


def in_key_order(const any_int[::1] first, const any_int[::1] second):
    cdef Py_ssize_t i
    cdef bint ok = True
    with nogil:
        for i in range(1, first.shape[0]):
            if first[i] < first[i - 1] or (first[i] == first[i - 1]
                                           and second[i] < second[i - 1]):
                ok = False
                break
    return ok


cdef int64_t _search_left(const int64_t* keys, int64_t n, int64_t value) noexcept nogil:
    cdef int64_t lo = 0
    cdef int64_t hi = n
    cdef int64_t mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if keys[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def rank_in(const int64_t[::1] values, const int64_t[::1] keys):
    cdef Py_ssize_t n = values.shape[0]
    cdef Py_ssize_t nk = keys.shape[0]
    out_arr = np.empty(n, np.int64)  # every row written below
    cdef int64_t[::1] out = out_arr
    cdef int64_t lo, width, span, d, f
    cdef Py_ssize_t i, j
    cdef int64_t[::1] table
    if nk == 0:
        out_arr.fill(-1)
        return out_arr
    lo = keys[0]
    width = keys[nk - 1] - lo  # wraps negative when the keys span 2^63 or more
    if 0 <= width < max(1 << 22, 4 * nk):
        span = width + 1
        table = np.full(span, -1, np.int64)
        with nogil:
            for i in range(nk):
                table[keys[i] - lo] = i
            for j in range(n):
                d = values[j] - lo  # meaningful only for values >= lo (else it may wrap)
                out[j] = table[d] if values[j] >= lo and 0 <= d < span else -1
        return out_arr
    with nogil:
        for j in range(n):
            f = _search_left(&keys[0], nk, values[j])
            out[j] = f if f < nk and keys[f] == values[j] else -1
    return out_arr


# k-way merges of sorted runs (`sorting.merge_text_runs`, `merge_int_runs`): a loser tree
# of the runs' next rows ordered by (bucket, key, run), so equal keys come out in run order,
# as a stable sort of the runs one after another orders them. Each run's next row keeps its
# bucket and its key's first 8 bytes (text) in the run's own slot, so most comparisons are of
# two integers; an exhausted run's bucket is EXHAUSTED, above every bucket.

cdef int64_t EXHAUSTED = 1 << 62


cdef struct Segment:
    const int32_t* bucket
    const int64_t* offsets  # text: the segment's n + 1 offsets into data
    const uint8_t* data
    const int64_t* key  # integers
    int64_t rows
    int64_t base  # the segment's first row in all segments one after another


cdef struct TextRun:
    const Segment* segment  # the run's segments, in order (its rows are theirs, one after
    int64_t segments        # another)
    int64_t at
    int64_t head_bucket
    uint64_t head_prefix


cdef struct IntRun:
    const Segment* segment
    int64_t segments
    int64_t at
    int64_t head_bucket
    int64_t head_key


ctypedef fused run_t:
    TextRun
    IntRun


cdef inline void _next_segment(run_t* run) noexcept nogil:
    """Past the end of the run's segment: on to the next one with rows, if any."""
    while run.at == run.segment[0].rows and run.segments > 1:
        run.segment += 1
        run.segments -= 1
        run.at = 0


cdef inline void _text_head(TextRun* run) noexcept nogil:
    _next_segment(run)
    if run.at < run.segment[0].rows:
        run.head_bucket = run.segment[0].bucket[run.at]
        run.head_prefix = _text_chunk(run.segment[0].offsets, run.segment[0].data, run.at, 0)
    else:
        run.head_bucket = EXHAUSTED
        run.head_prefix = 0


cdef inline int _text_rest(const uint8_t* a, int64_t la, const uint8_t* b,
                           int64_t lb) noexcept nogil:
    """-1, 0, 1 as text a is below, equal to, above text b (bytes, then shorter first)."""
    cdef int c = memcmp(a, b, <size_t>(la if la < lb else lb))
    if c:
        return c
    return -1 if la < lb else (1 if la > lb else 0)


cdef inline bint _text_before(const TextRun* runs, int64_t a, int64_t b) noexcept nogil:
    cdef const TextRun* x = &runs[a]
    cdef const TextRun* y = &runs[b]
    cdef const Segment* sx
    cdef const Segment* sy
    cdef int c
    if x.head_bucket != y.head_bucket:
        return x.head_bucket < y.head_bucket
    if x.head_prefix != y.head_prefix:
        return x.head_prefix < y.head_prefix
    if x.head_bucket == EXHAUSTED:
        return a < b
    sx = x.segment
    sy = y.segment
    c = _text_rest(sx.data + sx.offsets[x.at], sx.offsets[x.at + 1] - sx.offsets[x.at],
                   sy.data + sy.offsets[y.at], sy.offsets[y.at + 1] - sy.offsets[y.at])
    return c < 0 or (c == 0 and a < b)


cdef Segment* _segments(list runs, bint text, list keep, int64_t* total) except NULL:
    """Every run's segments (buckets, then offsets and bytes or keys) one after another,
    their arrays kept alive in `keep`; total: their rows."""
    cdef int64_t n = sum(len(r) for r in runs)
    cdef Segment* out = <Segment*>malloc(max(n, 1) * sizeof(Segment))
    cdef const int32_t[::1] b
    cdef const int64_t[::1] o
    cdef const uint8_t[::1] d
    cdef int64_t i = 0, base = 0
    if out == NULL:
        raise MemoryError()
    try:
        for run in runs:
            for segment in run:
                b = segment[0]
                o = segment[1]
                keep.append((b, o))
                out[i].bucket = &b[0] if b.shape[0] else NULL
                out[i].rows = b.shape[0]
                out[i].base = base
                base += b.shape[0]
                if text:
                    d = segment[2]
                    keep.append(d)
                    if o.shape[0] != b.shape[0] + 1:
                        raise ValueError("merge_text_runs: offsets do not match the rows")
                    out[i].offsets = &o[0]
                    out[i].data = &d[0] if d.shape[0] else <const uint8_t*>&o[0]
                    out[i].key = NULL
                else:
                    if o.shape[0] != b.shape[0]:
                        raise ValueError("merge_int_runs: keys do not match the rows")
                    out[i].key = &o[0] if o.shape[0] else NULL
                    out[i].offsets = NULL
                    out[i].data = NULL
                i += 1
    except BaseException:
        free(out)
        raise
    total[0] = base
    return out


def merge_text_runs(list runs, int32_t[::1] bucket_out, int64_t[::1] offsets_out,
                    uint8_t[::1] data_out, int64_t[::1] order):
    """Merge k runs, each a list of segments (bucket, offsets, bytes) whose rows one after
    another are sorted by (bucket, text), into bucket_out, (offsets_out, data_out) and order
    (each row's index in all segments one after another); returns how many rows equal the
    row before them."""
    cdef Py_ssize_t k = len(runs)
    cdef list keep = []
    cdef int64_t base = 0
    cdef Segment* segments = _segments(runs, True, keep, &base)
    cdef TextRun* heads = <TextRun*>malloc(max(k, 1) * sizeof(TextRun))
    cdef int64_t* tree = <int64_t*>malloc(max(k, 1) * sizeof(int64_t))
    cdef int64_t i, w = 0, row, start, length, at = 0, written = 0, repeats = 0
    cdef int64_t prev_bucket = -1, prev_length = 0
    cdef uint64_t prev_prefix = 0
    cdef const uint8_t* prev_text = NULL
    cdef TextRun* run
    cdef const Segment* seg
    cdef bint fits = True
    if heads == NULL or tree == NULL:
        free(segments)
        free(heads)
        free(tree)
        raise MemoryError()
    try:
        if order.shape[0] != base or bucket_out.shape[0] != base or \
                offsets_out.shape[0] != base + 1:
            raise ValueError("merge_text_runs: outputs of the wrong size")
        offsets_out[0] = 0
        _place_runs(heads, segments, runs, "merge_text_runs")
        if k:
            with nogil:
                for i in range(k):
                    _text_head(&heads[i])
                w = _loser_tree(heads, tree, k)
                while w >= 0 and at < base:
                    run = &heads[w]
                    seg = run.segment
                    row = run.at
                    start = seg.offsets[row]
                    length = seg.offsets[row + 1] - start
                    if written + length > data_out.shape[0]:
                        fits = False
                        break
                    if (run.head_bucket == prev_bucket and run.head_prefix == prev_prefix
                            and _text_rest(prev_text, prev_length, seg.data + start,
                                           length) == 0):
                        repeats += 1
                    prev_bucket = run.head_bucket
                    prev_prefix = run.head_prefix
                    prev_text = seg.data + start
                    prev_length = length
                    bucket_out[at] = <int32_t>run.head_bucket
                    memcpy(&data_out[written], seg.data + start, <size_t>length)
                    written += length
                    order[at] = seg.base + row
                    at += 1
                    offsets_out[at] = written
                    run.at += 1
                    _text_head(run)
                    w = _replay(heads, tree, k, w)
            if w < 0:
                raise MemoryError()
        if not fits:
            raise ValueError("merge_text_runs: the text does not fit data_out")
    finally:
        free(segments)
        free(heads)
        free(tree)
    return repeats


cdef inline void _int_head(IntRun* run) noexcept nogil:
    _next_segment(run)
    if run.at < run.segment[0].rows:
        run.head_bucket = run.segment[0].bucket[run.at]
        run.head_key = run.segment[0].key[run.at]
    else:
        run.head_bucket = EXHAUSTED
        run.head_key = 0


cdef inline bint _int_before(const IntRun* runs, int64_t a, int64_t b) noexcept nogil:
    cdef const IntRun* x = &runs[a]
    cdef const IntRun* y = &runs[b]
    if x.head_bucket != y.head_bucket:
        return x.head_bucket < y.head_bucket
    if x.head_key != y.head_key:
        return x.head_key < y.head_key
    return a < b


cdef inline bint _before(const run_t* runs, int64_t a, int64_t b) noexcept nogil:
    """Whether run a's head row comes before run b's (equal keys: the earlier run first)."""
    if run_t is TextRun:
        return _text_before(runs, a, b)
    else:
        return _int_before(runs, a, b)


cdef int64_t _loser_tree(const run_t* runs, int64_t* tree, int64_t k) noexcept nogil:
    """Fill the loser tree tree[1:k] (leaf i is node k + i; node j's children 2j, 2j + 1);
    returns the winner, or -1 when out of memory."""
    cdef int64_t* win = <int64_t*>malloc(2 * k * sizeof(int64_t))
    cdef int64_t j, a, b, w
    if win == NULL:
        return -1
    for j in range(k):
        win[k + j] = j
    for j in range(k - 1, 0, -1):
        a = win[2 * j]
        b = win[2 * j + 1]
        if _before(runs, a, b):
            win[j] = a
            tree[j] = b
        else:
            win[j] = b
            tree[j] = a
    w = win[1] if k > 1 else 0
    free(win)
    return w


cdef inline int64_t _replay(const run_t* runs, int64_t* tree, int64_t k,
                            int64_t w) noexcept nogil:
    """The new winner once run w's next row has changed."""
    cdef int64_t j = (w + k) >> 1
    cdef int64_t t
    while j >= 1:
        if _before(runs, tree[j], w):
            t = tree[j]
            tree[j] = w
            w = t
        j >>= 1
    return w


cdef int _place_runs(run_t* heads, Segment* segments, list runs, str caller) except -1:
    """Each run's reading place at its first row, its segments `segments`' next ones."""
    cdef Py_ssize_t i
    cdef int64_t first = 0
    for i in range(len(runs)):
        if not len(runs[i]):
            raise ValueError(f"{caller}: a run without segments")
        heads[i].segment = &segments[first]
        heads[i].segments = len(runs[i])
        heads[i].at = 0
        first += heads[i].segments
    return 0


def merge_int_runs(list runs, int32_t[::1] bucket_out, int64_t[::1] key_out,
                   int64_t[::1] order):
    """`merge_text_runs` for int64 keys: segments (bucket, key)."""
    cdef Py_ssize_t k = len(runs)
    cdef list keep = []
    cdef int64_t base = 0
    cdef Segment* segments = _segments(runs, False, keep, &base)
    cdef IntRun* heads = <IntRun*>malloc(max(k, 1) * sizeof(IntRun))
    cdef int64_t* tree = <int64_t*>malloc(max(k, 1) * sizeof(int64_t))
    cdef int64_t i, w = 0, at = 0, repeats = 0
    cdef int64_t prev_bucket = -1, prev_key = 0
    cdef IntRun* run
    if heads == NULL or tree == NULL:
        free(segments)
        free(heads)
        free(tree)
        raise MemoryError()
    try:
        if order.shape[0] != base or bucket_out.shape[0] != base or key_out.shape[0] != base:
            raise ValueError("merge_int_runs: outputs of the wrong size")
        _place_runs(heads, segments, runs, "merge_int_runs")
        if k:
            with nogil:
                for i in range(k):
                    _int_head(&heads[i])
                w = _loser_tree(heads, tree, k)
                while w >= 0 and at < base:
                    run = &heads[w]
                    if run.head_bucket == prev_bucket and run.head_key == prev_key:
                        repeats += 1
                    prev_bucket = run.head_bucket
                    prev_key = run.head_key
                    bucket_out[at] = <int32_t>run.head_bucket
                    key_out[at] = run.head_key
                    order[at] = run.segment.base + run.at
                    at += 1
                    run.at += 1
                    _int_head(run)
                    w = _replay(heads, tree, k, w)
            if w < 0:
                raise MemoryError()
    finally:
        free(segments)
        free(heads)
        free(tree)
    return repeats


# A run's text keys put in key order where they will stay (`sorting.text_run_order`): each
# piece's texts copied straight into their bucket's region (a counting sort of the bytes),
# then each bucket sorted and rearranged within its own region, which fits in cache, where a
# sort of row numbers and a gather of the texts by them read the whole text at random.

cdef inline void _place_text(const uint8_t* text, int64_t length, int64_t b, int64_t row,
                             int64_t[::1] row_fill, int64_t[::1] byte_fill,
                             int64_t[::1] offsets_out, uint8_t[::1] data_out,
                             dest_t[::1] order) noexcept nogil:
    """One text to bucket b's next place: row row_fill[b], bytes at byte_fill[b], both
    advanced; `row` (its row in the run) recorded as that place's source."""
    cdef int64_t r = row_fill[b]
    cdef int64_t at = byte_fill[b]
    row_fill[b] = r + 1
    if length:
        memcpy(&data_out[at], text, <size_t>length)
    byte_fill[b] = at + length
    offsets_out[r] = at
    order[r] = <dest_t>row


def scatter_text(const int32_t[::1] bucket, const int64_t[::1] offsets, const uint8_t[::1] data,
                 int64_t[::1] row_fill, int64_t[::1] byte_fill, int64_t[::1] offsets_out,
                 uint8_t[::1] data_out, dest_t[::1] order, int64_t base):
    """Copy a piece's texts (rows base.. of the run) to their bucket's next places: row i to
    row row_fill[b], its bytes at byte_fill[b], both advanced."""
    cdef Py_ssize_t n = bucket.shape[0]
    cdef Py_ssize_t i
    if offsets.shape[0] != n + 1:
        raise ValueError("scatter_text: offsets do not match the rows")
    with nogil:
        for i in range(n):
            _place_text(&data[0] + offsets[i], offsets[i + 1] - offsets[i], bucket[i],
                        base + i, row_fill, byte_fill, offsets_out, data_out, order)


def scatter_text_views(const int32_t[::1] bucket, const int32_t[:, ::1] views, list buffers,
                       int64_t[::1] row_fill, int64_t[::1] byte_fill, int64_t[::1] offsets_out,
                       uint8_t[::1] data_out, dest_t[::1] order, int64_t base):
    """`scatter_text` for a piece in Arrow's string view layout (`_views.pxi`: polars' own,
    read without the copy into offsets and bytes that exporting it as a large string
    makes)."""
    cdef Py_ssize_t n = bucket.shape[0]
    cdef Py_ssize_t i
    cdef int64_t length
    cdef const uint8_t** data
    if views.shape[0] != n or views.shape[1] != 4:
        raise ValueError("scatter_text_views: views do not match the rows")
    data = _view_buffers(views, buffers, "scatter_text_views")
    with nogil:
        for i in range(n):
            length = views[i, 0]
            _place_text(data[views[i, 2]] + <uint32_t>views[i, 3] if length > 12
                        else (<const uint8_t*>&views[i, 0]) + 4, length, bucket[i],
                        base + i, row_fill, byte_fill, offsets_out, data_out, order)
    free(data)


cdef int _sort_region(int64_t a, int64_t e, int64_t* offsets, uint8_t* data,
                      dest_t* order) noexcept nogil:
    """Sort rows a..e (texts one after another in data, from offsets[a] to offsets[e]) by
    their bytes, stably, in place: texts, offsets and order rearranged."""
    cdef int64_t m = e - a
    cdef int64_t q, r, start, length, at
    cdef int64_t lo = offsets[a]
    cdef int64_t* perm
    cdef uint64_t* keys
    cdef int64_t* old_offsets
    cdef dest_t* old_order
    cdef uint8_t* old_data
    cdef int status = 0
    cdef Texts texts
    if m <= 1:
        return 0
    perm = <int64_t*>malloc(m * sizeof(int64_t))
    keys = <uint64_t*>malloc(m * sizeof(uint64_t))
    old_offsets = <int64_t*>malloc((m + 1) * sizeof(int64_t))
    old_order = <dest_t*>malloc(m * sizeof(dest_t))
    old_data = <uint8_t*>malloc(max(offsets[e] - lo, 1))
    if perm == NULL or keys == NULL or old_offsets == NULL or old_order == NULL or \
            old_data == NULL:
        status = -1
    else:
        for q in range(m):
            perm[q] = a + q
            keys[q] = _text_chunk(offsets, data, a + q, 0)
        texts.offsets = offsets
        texts.data = data
        texts.ptrs = NULL
        texts.lens = NULL
        status = _sort_bucket(perm, keys, 0, m, &texts)
    if status == 0:
        for q in range(m + 1):
            old_offsets[q] = offsets[a + q]
        for q in range(m):
            old_order[q] = order[a + q]
        memcpy(old_data, &data[lo], <size_t>(offsets[e] - lo))
        at = lo
        for q in range(m):
            r = perm[q] - a
            start = old_offsets[r]
            length = old_offsets[r + 1] - start
            memcpy(&data[at], &old_data[start - lo], <size_t>length)
            offsets[a + q] = at
            order[a + q] = old_order[r]
            at += length
    free(perm)
    free(keys)
    free(old_offsets)
    free(old_order)
    free(old_data)
    return status


def sort_text_regions(const int64_t[::1] first, int64_t[::1] offsets, uint8_t[::1] data,
                      dest_t[::1] order):
    """Sort each bucket's rows first[b]..first[b + 1] in place (`_sort_region`), buckets in
    parallel."""
    cdef Py_ssize_t n_buckets = first.shape[0] - 1
    cdef Py_ssize_t b
    cdef int64_t[::1] failed = np.zeros(max(n_buckets, 1), np.int64)
    cdef int64_t* op = &offsets[0]
    cdef uint8_t* dp = &data[0] if data.shape[0] else NULL
    cdef dest_t* rp = &order[0] if order.shape[0] else NULL
    if dp == NULL or rp == NULL:
        return
    for b in prange(n_buckets, nogil=True, schedule="dynamic"):
        failed[b] = _sort_region(first[b], first[b + 1], op, dp, rp)
    if n_buckets and np.asarray(failed).min() < 0:
        raise MemoryError("sort_text_regions: out of memory")

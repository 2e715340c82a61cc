"""Compiled numeric kernels (numba) on numpy arrays: no I/O, no polars.

Rule kinds are small integers here (KIND_*); every kernel that looks up a Grundy value takes the
flat table layout built by `grundy.TableSet`: one concatenated `values` array and, per table,
`base` (offset into values), `length` (values stored), `pre`/`per` (proven preperiod and period,
per == 0 when none), and `kind`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

KIND_SUBTRACTION = 0
KIND_NIM = 1
KIND_HALF = 2

BEYOND_TABLE = -1

_U32 = np.uint64(0xFFFFFFFF)
_BASE = np.uint64(0x100000001B3)


@njit(cache=True, inline="always")
def mix64(h):
    """splitmix64 finaliser: spreads a polynomial window hash over all 64 bits."""
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


@njit(cache=True)
def window_power(m):
    """_BASE ** (m - 1) modulo 2**64, the weight of a window's oldest value in its rolling hash,
    by repeated squaring: O(log m) for windows as long as 2**32 - 1 values."""
    result = np.uint64(1)
    factor = _BASE
    e = m - 1
    while e > 0:
        if e & 1:
            result *= factor
        factor *= factor
        e >>= 1
    return result


@njit(cache=True)
def _windows_equal(vals, a, b, m):
    for i in range(m):
        if vals[a - m + i] != vals[b - m + i]:
            return False
    return True


@njit(cache=True)
def _probe(slots, vals, y, m, mixed):
    """Find window W_y (ending before index y) in the open-addressing table.

    A slot packs (high 32 bits of the mixed hash) << 32 | window end. Returns the earlier end x
    with W_x == W_y (verified value by value), or the negated free slot index - 1.
    """
    mask = np.uint64(slots.shape[0] - 1)
    idx = mixed & mask
    tag = mixed >> np.uint64(32)
    while True:
        s = slots[idx]
        if s == 0:
            return -np.int64(idx) - 1
        if (s >> np.uint64(32)) == tag:
            x = np.int64(s & _U32)
            if _windows_equal(vals, x, y, m):
                return x
        idx = (idx + np.uint64(1)) & mask


@njit(cache=True)
def _rebuild(vals, m, y_end, n_slots, bpow):
    """Re-insert windows W_m .. W_{y_end - 1} into a fresh table of n_slots slots."""
    slots = np.zeros(n_slots, np.uint64)
    h = np.uint64(0)
    for i in range(m):
        h = h * _BASE + np.uint64(vals[i]) + np.uint64(1)
    for y in range(m, y_end):
        if y > m:
            h = (h - (np.uint64(vals[y - 1 - m]) + np.uint64(1)) * bpow) * _BASE
            h += np.uint64(vals[y - 1]) + np.uint64(1)
        mixed = mix64(h)
        r = _probe(slots, vals, y, m, mixed)
        slot = -(r + 1)
        slots[slot] = ((mixed >> np.uint64(32)) << np.uint64(32)) | np.uint64(y)
    return slots


@njit(cache=True, nogil=True)
def tabulate_subtraction(moves, vals, start, stop_len):
    """SG values of the subtraction game with sorted distinct positive `moves`.

    Fills vals[start:n], where vals[0:start] holds values already tabulated without a repeated
    window (a table being extended), and stops at `stop_len` values or as soon as a window of
    max(moves) values repeats, which proves exact periodicity (docs/ARCHITECTURE.md,
    "Periods"). Returns (n, preperiod, period); period is 0 when no repeat was seen within
    stop_len values. Window ends must stay below 2**32.
    """
    k = moves.shape[0]
    m = moves[k - 1]
    marks = np.zeros(k + 2, np.int64)
    bpow = window_power(m)
    h = np.uint64(0)
    for i in range(max(0, start - m), start):
        h = h * _BASE + np.uint64(vals[i]) + np.uint64(1)
    used = max(0, start - m + 1)
    n_slots = 1 << 12
    while used * 10 > n_slots * 7:
        n_slots *= 2
    slots = _rebuild(vals, m, start + 1, n_slots, bpow) if used else np.zeros(n_slots, np.uint64)
    for x in range(start, stop_len):
        stamp = x + 1
        for i in range(k):
            s = moves[i]
            if s > x:
                break
            marks[vals[x - s]] = stamp
        g = 0
        while marks[g] == stamp:
            g += 1
        vals[x] = g
        y = x + 1
        if y < m:
            h = h * _BASE + np.uint64(g) + np.uint64(1)
            continue
        if y == m:
            h = h * _BASE + np.uint64(g) + np.uint64(1)
        else:
            h = (h - (np.uint64(vals[x - m]) + np.uint64(1)) * bpow) * _BASE
            h += np.uint64(g) + np.uint64(1)
        mixed = mix64(h)
        r = _probe(slots, vals, y, m, mixed)
        if r >= 0:
            return y, r - m, y - r
        slots[-(r + 1)] = ((mixed >> np.uint64(32)) << np.uint64(32)) | np.uint64(y)
        used += 1
        if used * 10 > n_slots * 7:
            n_slots *= 2
            slots = _rebuild(vals, m, y + 1, n_slots, bpow)
    return stop_len, 0, 0


@njit(cache=True, parallel=True, nogil=True)
def tabulate_many(moves, moves_base, moves_len, vals, vals_base, start, stop_len, worker_start,
                  jobs):
    """`tabulate_subtraction` for many rules at once, one thread per worker: worker w takes the
    rules jobs[worker_start[w]:worker_start[w + 1]], so the caller decides the load balance.
    Rule j's moves are moves[moves_base[j]:][:moves_len[j]] and its values go to
    vals[vals_base[j]:][:stop_len[j]], whose first start[j] are given. Returns
    (n, preperiod, period) per rule."""
    r = moves_base.shape[0]
    n = np.zeros(r, np.int64)
    pre = np.zeros(r, np.int64)
    per = np.zeros(r, np.int64)
    for w in prange(worker_start.shape[0] - 1):
        for q in range(worker_start[w], worker_start[w + 1]):
            j = jobs[q]
            mv = moves[moves_base[j]:moves_base[j] + moves_len[j]]
            out = vals[vals_base[j]:vals_base[j] + stop_len[j]]
            n[j], pre[j], per[j] = tabulate_subtraction(mv, out, start[j], stop_len[j])
    return n, pre, per


@njit(cache=True, inline="always")
def half_sg(h):
    """Take-at-most-half: drop the trailing one-bits of h, then halve."""
    while h & 1:
        h >>= 1
    return h >> 1


@njit(cache=True, inline="always")
def sg_of(h, t, values, base, length, pre, per, kind):
    """Grundy value of heap h under table t, or BEYOND_TABLE when it is not known."""
    kd = kind[t]
    if kd == KIND_NIM:
        return h
    if kd == KIND_HALF:
        return half_sg(h)
    if h < length[t]:
        return np.int64(values[base[t] + h])
    p = per[t]
    if p > 0:
        return np.int64(values[base[t] + pre[t] + (h - pre[t]) % p])
    return BEYOND_TABLE


@njit(cache=True, parallel=True, nogil=True)
def nim_sums_wide(offsets, heaps, table_of_row, values, base, length, pre, per, kind):
    """XOR of Grundy values per position of a list column (Arrow offsets + flat heaps).

    Returns (nim_sum, bad_heap): bad_heap is -1 for an evaluated row, else the 0-based index of
    the first heap whose value lies beyond its table (no proven period). The table's parameters
    are hoisted out of the heap loop: a branchy per-heap lookup was 5x slower. Rows run on
    all threads.
    """
    n = offsets.shape[0] - 1
    nim = np.zeros(n, np.int64)
    bad = np.full(n, -1, np.int64)
    for i in prange(n):
        t = table_of_row[i]
        kd = kind[t]
        start = offsets[i]
        stop = offsets[i + 1]
        acc = np.int64(0)
        if kd == KIND_SUBTRACTION:
            b = base[t]
            n_vals = length[t]
            q = pre[t]
            p = per[t]
            for j in range(start, stop):
                h = heaps[j]
                if h < n_vals:
                    acc ^= np.int64(values[b + h])
                elif p > 0:
                    acc ^= np.int64(values[b + q + (h - q) % p])
                else:
                    bad[i] = j - start
                    acc = 0
                    break
        elif kd == KIND_NIM:
            for j in range(start, stop):
                acc ^= heaps[j]
        else:
            for j in range(start, stop):
                acc ^= half_sg(heaps[j])
        nim[i] = acc
    return nim, bad


@njit(cache=True, nogil=True)
def sg_per_heap(heaps, table_of_row, values, base, length, pre, per, kind):
    """Grundy value of each heap (long form); BEYOND_TABLE where it is not known."""
    n = heaps.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = sg_of(heaps[i], table_of_row[i], values, base, length, pre, per, kind)
    return out


@njit(cache=True)
def winning_move(heaps, nim_sum, t, moves, moves_base, moves_len, values, base, length, pre,
                 per, kind):
    """One winning move (heap index, stones taken) for a position with nim_sum != 0.

    Chooses the first heap whose Grundy value g has g ^ nim_sum < g; returns (-1, -1) when no
    legal move reaches nim-sum 0 (which theory rules out for a correct table).
    """
    for i in range(heaps.shape[0]):
        h = heaps[i]
        g = sg_of(h, t, values, base, length, pre, per, kind)
        target = g ^ nim_sum
        if target >= g:
            continue
        kd = kind[t]
        if kd == KIND_NIM:
            return i, h - target
        if kd == KIND_HALF:
            lo = h - h // 2
            for j in range(63):
                ones = (np.int64(1) << j) - 1
                if target > ((np.int64(1) << (62 - j)) - 1):
                    break
                y = (target << (j + 1)) | ones
                if y > h - 1:
                    break
                if y >= lo:
                    return i, h - y
            continue
        s = _subtraction_move(h, target, moves[moves_base[t]:moves_base[t] + moves_len[t]],
                              values, base[t], length[t], pre[t], per[t])
        if s > 0:
            return i, s
    return -1, -1


@njit(cache=True, inline="always")
def _subtraction_move(h, target, moves, values, b, n_vals, q, p):
    """The smallest move s with SG(h - s) == target (0 if none), with the table's parameters
    hoisted out of the loop as in nim_sums_wide (sg_of's kind and range checks per move made
    winning moves 5x slower than the XOR)."""
    for j in range(moves.shape[0]):
        s = moves[j]
        if s > h:
            break
        x = h - s
        if x < n_vals:
            g = np.int64(values[b + x])
        elif p > 0:
            g = np.int64(values[b + q + (x - q) % p])
        else:
            continue
        if g == target:
            return s
    return 0


@njit(cache=True, parallel=True, nogil=True)
def winning_moves_wide(offsets, heaps, table_of_row, nim, moves, moves_base, moves_len, values,
                       base, length, pre, per, kind):
    """winning_move for every W row of a list column; (-1, -1) for L rows."""
    n = offsets.shape[0] - 1
    move_heap = np.full(n, -1, np.int64)
    move_take = np.full(n, -1, np.int64)
    for i in prange(n):
        if nim[i] == 0:
            continue
        a, b = winning_move(heaps[offsets[i]:offsets[i + 1]], nim[i], table_of_row[i], moves,
                            moves_base, moves_len, values, base, length, pre, per, kind)
        move_heap[i] = a
        move_take[i] = b
    return move_heap, move_take


@njit(cache=True, nogil=True)
def max_heap_per_table(offsets, heaps, table_of_row, n_tables):
    """Largest heap each table is asked about (-1 where none), over rows with table >= 0."""
    out = np.full(n_tables, -1, np.int64)
    for i in range(offsets.shape[0] - 1):
        t = table_of_row[i]
        if t < 0:
            continue
        m = out[t]
        for j in range(offsets[i], offsets[i + 1]):
            if heaps[j] > m:
                m = heaps[j]
        out[t] = m
    return out


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
def _sort_texts(order, lo, hi, offsets, data):
    """Sort order[lo:hi] (rows) by their texts' bytes, stably: most significant 8 bytes
    first, then only the runs still tied on the next 8, and so on; texts equal up to the
    shorter one's end put the shorter first, and equal texts keep their order."""
    stack = [(lo, hi, 0)]
    while len(stack):
        a, b, depth = stack.pop()
        keys = np.empty(b - a, np.uint64)
        for i in range(a, b):
            keys[i - a] = _text_chunk(offsets, data, order[i], depth)
        within = np.argsort(keys, kind="mergesort")
        rows = order[a:b].copy()
        for q in range(b - a):
            order[a + q] = rows[within[q]]
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
                else:  # every text ends within these bytes: shorter first
                    lengths = np.empty(j - i, np.int64)
                    for r in range(i, j):
                        lengths[r - i] = offsets[order[r] + 1] - offsets[order[r]]
                    by_length = np.argsort(lengths, kind="mergesort")
                    tied = order[i:j].copy()
                    for q in range(j - i):
                        order[i + q] = tied[by_length[q]]
            i = j


@njit(cache=True, parallel=True, nogil=True)
def text_key_order(bucket, n_buckets, offsets, data):
    """The stable order of rows by (bucket, text), texts given as Arrow (offsets, bytes):
    a counting sort on the dense bucket, then each bucket's rows sorted by their bytes (as
    polars orders strings), buckets in parallel. Returns (order, rows per bucket), where
    order[j] is the row at sorted position j."""
    n = bucket.shape[0]
    counts = np.zeros(n_buckets, np.int64)
    for i in range(n):
        counts[bucket[i]] += 1
    first = np.zeros(n_buckets + 1, np.int64)
    for b in range(n_buckets):
        first[b + 1] = first[b] + counts[b]
    fill = first[:-1].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        order[fill[bucket[i]]] = i
        fill[bucket[i]] += 1
    for b in prange(n_buckets):
        if counts[b] > 1:
            _sort_texts(order, first[b], first[b + 1], offsets, data)
    return order, counts


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


@njit(cache=True, inline="always")
def _is_space(c):
    return c == 32 or 9 <= c <= 13


@njit(cache=True, inline="always")
def _scan_heap_text(data, a, b, values, at, store):
    """Heaps in data[a:b] ("5 12", "5,12", "[5, 12]"): how many, stored from values[at] when
    `store`; -1 when the text is anything else (a "+", a long number, non-ASCII, a stray
    bracket, a comma with no heap before or after it), which the caller parses the slow,
    exact way."""
    while a < b and _is_space(data[a]):
        a += 1
    while b > a and _is_space(data[b - 1]):
        b -= 1
    if a < b and data[a] == 91:  # "["
        if data[b - 1] != 93:  # "]"
            return -1
        a += 1
        b -= 1
    count = 0
    after_heap = False  # a heap since the last comma: a comma here separates, not empties
    i = a
    while i < b:
        c = data[i]
        if c == 44:  # ","
            if not after_heap:
                return -1
            after_heap = False
            i += 1
            continue
        if _is_space(c):
            i += 1
            continue
        negative = c == 45  # "-"
        if negative:
            i += 1
        start = i
        value = 0
        while i < b and 48 <= data[i] <= 57:
            value = value * 10 + (data[i] - 48)
            i += 1
        if i == start or i - start > 18 or (i < b and data[i] != 44 and not _is_space(data[i])):
            return -1
        if store:
            values[at + count] = -value if negative else value
        count += 1
        after_heap = True
    if count and not after_heap:  # a trailing comma
        return -1
    return count


@njit(cache=True, parallel=True, nogil=True)
def heap_text_lists(offsets, data):
    """Parse each string data[offsets[i]:offsets[i+1]] as a list of heaps: (list offsets,
    values, rows the plain grammar does not cover, which hold an empty list here)."""
    n = offsets.shape[0] - 1
    found = np.empty(n, np.int64)
    none = np.zeros(0, np.int64)
    for i in prange(n):
        found[i] = _scan_heap_text(data, offsets[i], offsets[i + 1], none, 0, False)
    counts = np.empty(n + 1, np.int64)
    counts[0] = 0
    for i in range(n):
        counts[i + 1] = counts[i] + max(found[i], 0)
    values = np.empty(counts[n], np.int64)
    for i in prange(n):
        if found[i] > 0:
            _scan_heap_text(data, offsets[i], offsets[i + 1], values, counts[i], True)
    return counts, values, np.nonzero(found < 0)[0]


@njit(cache=True, nogil=True)
def int_text_values(offsets, data):
    """Each string data[offsets[i]:offsets[i+1]], less ASCII spaces around it, as an integer
    written exactly as Int64 writes it ("-" only, no leading zero, no "-0"; at most 18
    digits): (values, True), or (values so far, False) at the first string that is not."""
    n = offsets.shape[0] - 1
    values = np.empty(n, np.int64)
    for i in range(n):
        a, b = offsets[i], offsets[i + 1]
        while a < b and _is_space(data[a]):
            a += 1
        while b > a and _is_space(data[b - 1]):
            b -= 1
        negative = a < b and data[a] == 45
        if negative:
            a += 1
        if a == b or b - a > 18 or (data[a] == 48 and (b - a > 1 or negative)):
            return values, False
        value = 0
        for j in range(a, b):
            d = data[j] - 48
            if d < 0 or d > 9:
                return values, False
            value = value * 10 + d
        values[i] = -value if negative else value
    return values, True


@njit(cache=True, nogil=True)
def needs_strip(offsets, data):
    """Whether any string data[offsets[i]:offsets[i+1]] is empty or may start or end with
    whitespace (an ASCII space or any non-ASCII byte, which the exact strip then judges)."""
    for i in range(offsets.shape[0] - 1):
        a, b = offsets[i], offsets[i + 1]
        if a == b or _is_space(data[a]) or data[a] >= 128 or _is_space(data[b - 1]) \
                or data[b - 1] >= 128:
            return True
    return False


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


@njit(cache=True, nogil=True)
def in_key_order(first, second):
    """Whether rows are sorted by (first, second): then every key's rows are contiguous."""
    for i in range(1, first.shape[0]):
        if first[i] < first[i - 1] or first[i] == first[i - 1] and second[i] < second[i - 1]:
            return False
    return True


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


_QUOTE, _COMMA, _CR, _LF = 34, 44, 13, 10
_LINE_START, _FIELD_START, _UNQUOTED, _QUOTED = 0, 1, 2, 3
CSV_IN_QUOTES = _QUOTED  # the state `csv_scan_part` returns inside a quoted field


@njit(cache=True, nogil=True)
def _csv_walk(data, i, limit, state, records, line, open_line, quoted_break, stray_line,
              field_break, stop_after):
    """The walk of `csv_scan` from offset `i` with the given state, up to offset `limit`
    (bytes past it are looked at only to finish a '""' or a CRLF begun before it, or to see
    what follows a closing quote). Returns (offset reached, state, records, line, open_line,
    quoted_break, stray_line, field_break, stopped)."""
    n = data.shape[0]
    while i < limit:
        c = data[i]
        i += 1
        if state == _QUOTED:
            if c == _QUOTE:
                if i < n and data[i] == _QUOTE:
                    i += 1
                else:
                    state = _UNQUOTED
                    if (field_break and stray_line == 0 and i < n and data[i] != _COMMA
                            and data[i] != _LF and data[i] != _CR):
                        stray_line = open_line
            elif c == _LF or c == _CR:
                quoted_break = True
                field_break = True
                if c == _CR and i < n and data[i] == _LF:
                    i += 1
                line += 1
            continue
        if c == _LF or c == _CR:
            if c == _CR and i < n and data[i] == _LF:
                i += 1
            line += 1
            if state != _LINE_START:
                state = _LINE_START
                if records == stop_after:
                    return (i, state, records, line, open_line, quoted_break, stray_line,
                            field_break, True)
            continue
        if state == _LINE_START:
            records += 1
            state = _FIELD_START
        if c == _COMMA:
            state = _FIELD_START
        elif state == _FIELD_START:
            if c == _QUOTE:
                state = _QUOTED
                open_line = line
                field_break = False
            else:
                state = _UNQUOTED
    return i, state, records, line, open_line, quoted_break, stray_line, field_break, False


@njit(cache=True, nogil=True)
def csv_scan(data, start, stop_after):
    """Walk CSV bytes data[start:] the way pyarrow's parser reads them: fields split by ",",
    a '"' opens a quoted field only at the start of a field, inside one '""' is a quote and
    a lone '"' closes it (what follows, up to the next comma or line end, is plain text), a
    quote anywhere else is a literal character; lines end with LF, CRLF or CR, and blank
    lines are no records.

    Returns (records: non-blank records seen, the last one possibly unterminated; end: the
    offset just past the line end of record number `stop_after` (stop_after <= 0: never
    stop), else len(data); open_line: the 1-based physical line (LF, CRLF or CR each end
    one, quoted or not) of the opening quote of a field still open at `end`, else 0;
    quoted_break: whether a quoted field before `end` holds a line break; stray_line: the
    physical line of the opening quote of the first field that holds a line break and whose
    closing quote text follows (not a comma, a line end or the end), else 0: two quotes left
    open that closed each other, never valid by the strict CSV rules)."""
    n = data.shape[0]
    i, state, records, line, open_line, quoted_break, stray_line, _, stopped = _csv_walk(
        data, start, n, _LINE_START, 0, 1, 0, False, 0, False, stop_after)
    if stopped:
        return records, i, 0, quoted_break, stray_line
    return records, n, open_line if state == _QUOTED else 0, quoted_break, stray_line


@njit(cache=True, nogil=True)
def csv_scan_part(data, limit, state, line, open_line, quoted_break, stray_line,
                  field_break):
    """`csv_scan` over a file that arrives in parts: walk data[:limit] from `state` (start
    with (0, 1, 0, False, 0, False)); returns (offset reached, which may pass `limit` by the
    one byte of a '""' or CRLF, and the new state, line, open_line, quoted_break, stray_line,
    field_break). The caller keeps data[offset:] and puts it before the next part; at the
    end of the file, state 3 (_QUOTED) means the quote opened on `open_line` is never
    closed."""
    i, state, _, line, open_line, quoted_break, stray_line, field_break, _ = _csv_walk(
        data, 0, limit, state, 0, line, open_line, quoted_break, stray_line, field_break, -1)
    return i, state, line, open_line, quoted_break, stray_line, field_break

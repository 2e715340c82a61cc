"""Kernels (nim sums and winning moves over list columns) against brute-force game search.

References are written here from the rules of the games: a memoised search over multi-heap
positions (a position is winning iff some move reaches a losing one), naive mex tables with the
naive first-repeating-window period, and a half closed form checked against brute force.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from functools import cache

import numpy as np
import pytest
from conftest import naive_period, naive_sg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import kernels
from pipeline.grundy import MAX_HEAP, TableSet, build_table, canonical_rule

# ---------------------------------------------------------------------------------------------
# Independent references
# ---------------------------------------------------------------------------------------------


def naive_first_repeat(moves, limit=200_000):
    """(pre, per) from the first window of max(S) values seen twice (conftest's reference)."""
    return naive_period(moves, limit)[:2]


def half_closed(x):
    """Take-at-most-half: shift out the trailing one-bits and the zero above them."""
    t = ((x + 1) & -(x + 1)).bit_length() - 1
    return x >> (t + 1)


def takes(kind, moves, h):
    """Legal numbers of stones to take from one heap of size h."""
    if kind == "nim":
        return range(1, h + 1)
    if kind == "half":
        return range(1, h // 2 + 1)
    return [s for s in moves if s <= h]


def is_legal(kind, moves, h, take):
    if kind == "nim":
        return 1 <= take <= h
    if kind == "half":
        return 1 <= take <= h // 2
    return take in moves and take <= h


@cache
def wins(kind, moves, heaps):
    """Brute force: the player to move wins iff some move reaches a losing position."""
    for i, h in enumerate(heaps):
        for t in takes(kind, moves, h):
            nxt = tuple(sorted(heaps[:i] + (h - t,) + heaps[i + 1 :]))
            if not wins(kind, moves, nxt):
                return True
    return False


def brute_wins(kind, moves, heaps):
    return wins(kind, tuple(moves), tuple(sorted(heaps)))


class RefSG:
    """Reference SG for any heap size (Python ints) of one rule."""

    def __init__(self, kind, moves=()):
        self.kind, self.moves = kind, tuple(moves)
        if kind == "subtraction":
            self.pre, self.per = naive_first_repeat(self.moves)
            self.v = naive_sg(self.moves, self.pre + self.per)

    def __call__(self, h):
        if self.kind == "nim":
            return h
        if self.kind == "half":
            return half_closed(h)
        return self.v[h] if h < self.pre else self.v[self.pre + (h - self.pre) % self.per]


def nim_sum(ref, heaps):
    acc = 0
    for h in heaps:
        acc ^= ref(h)
    return acc


# ---------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------


def make_tables(specs):
    """specs: list of (kind, moves); subtraction tables are built until the period is proven."""
    tables = []
    for kind, moves in specs:
        rule = canonical_rule(kind, list(moves) if kind == "subtraction" else None)
        tables.append(build_table(rule, need_len=1, probe_ops=10**7, cap=2**22))
    return TableSet.of(tables)


def run(ts, rows, nim_override=None):
    """rows: list of (table index, heaps). Returns nim, bad, move_heap, move_take (lists)."""
    offsets = np.zeros(len(rows) + 1, np.int64)
    offsets[1:] = np.cumsum([len(h) for _, h in rows])
    heaps = np.array([h for _, hs in rows for h in hs], dtype=np.int64)
    tor = np.array([t for t, _ in rows], dtype=np.int64)
    nim, bad = kernels.nim_sums_wide(offsets, heaps, tor, *ts.lookup_args())
    nim_in = nim if nim_override is None else np.asarray(nim_override, dtype=np.int64)
    mh, mt = kernels.winning_moves_wide(offsets, heaps, tor, nim_in, *ts.move_args())
    return nim.tolist(), bad.tolist(), mh.tolist(), mt.tolist()


SPECS = [
    ("subtraction", (1, 3, 4)),
    ("subtraction", (2, 5)),
    ("nim", ()),
    ("half", ()),
    ("subtraction", (2, 5, 12)),
    ("subtraction", (3, 7, 8)),
]
REFS = [RefSG(k, m) for k, m in SPECS]
TS = make_tables(SPECS)


def check_rows(specs, refs, ts, rows, brute=True):
    """Check nim sums, verdicts and winning moves of rows against the references."""
    nim, bad, mh, mt = run(ts, rows)
    for i, (t, hs) in enumerate(rows):
        kind, moves = specs[t]
        ref = refs[t]
        assert bad[i] == -1
        assert nim[i] == nim_sum(ref, hs), (t, hs)
        if brute:
            assert (nim[i] != 0) == brute_wins(kind, moves, hs), (t, hs)
        if nim[i] == 0:
            assert (mh[i], mt[i]) == (-1, -1)
            continue
        # a winning move: legal, and leads to a losing position
        assert 0 <= mh[i] < len(hs), (t, hs, mh[i])
        h = hs[mh[i]]
        assert is_legal(kind, moves, h, mt[i]), (t, hs, mh[i], mt[i])
        after = list(hs)
        after[mh[i]] = h - mt[i]
        assert nim_sum(ref, after) == 0, (t, hs, after)
        if brute:
            assert not brute_wins(kind, moves, after), (t, hs, after)


# ---------------------------------------------------------------------------------------------
# Reference self-checks
# ---------------------------------------------------------------------------------------------


def test_half_closed_form_matches_brute_force():
    v: list[int] = []
    for x in range(400):
        opts = {v[x - t] for t in range(1, x // 2 + 1)}
        g = 0
        while g in opts:
            g += 1
        v.append(g)
    assert [half_closed(x) for x in range(400)] == v


def test_single_heap_brute_force_matches_references():
    for (kind, moves), ref in zip(SPECS, REFS, strict=True):
        for h in range(60 if kind != "nim" else 15):
            assert brute_wins(kind, moves, [h]) == (ref(h) != 0), (kind, moves, h)


# ---------------------------------------------------------------------------------------------
# Hand-built positions
# ---------------------------------------------------------------------------------------------


def test_hand_built_rows():
    rows = [
        (0, []),  # empty position: no move, losing
        (0, [0]),
        (0, [2]),  # {1,3,4}: SG(2) = 0
        (0, [7]),  # SG(7) = 0
        (0, [5, 6]),
        (0, [9, 9]),
        (0, [1, 2, 3, 4, 5]),
        (1, [7]),
        (1, [3, 4, 9]),
        (1, [0, 0, 0]),
        (2, [1, 2, 3]),  # nim 1^2^3 = 0
        (2, [3, 5, 7]),
        (2, [9]),
        (2, [0, 0]),
        (3, [1]),  # half: 1 is losing
        (3, [2, 3]),
        (3, [7, 15, 31]),
        (3, [6, 10, 12]),
        (3, [40]),
        (4, [12, 13, 25]),
        (4, [30]),
        (5, [8, 16]),
        (5, [4, 11, 19]),
    ]
    check_rows(SPECS, REFS, TS, rows)
    nim, bad, mh, mt = run(TS, rows)
    assert nim[0] == 0 and bad[0] == -1 and (mh[0], mt[0]) == (-1, -1)
    assert nim[2] == 0 and nim[3] == 0 and nim[10] == 0 and nim[14] == 0
    # nim [9]: take all 9; half [40]: SG(40)=20, reach 31 = 2^5-1 (SG 0) by taking 9
    assert (mh[12], mt[12]) == (0, 9)
    assert (mh[18], mt[18]) == (0, 9)


def test_all_small_positions_exhaustively():
    rows = []
    for t, (kind, _) in enumerate(SPECS):
        hi = 6 if kind == "nim" else 14
        for a in range(hi):
            for b in range(a, hi):
                rows.append((t, [a, b]))
                for c in range(b, hi, 3):
                    rows.append((t, [a, b, c]))
    check_rows(SPECS, REFS, TS, rows)


def test_beyond_table_reports_bad_heap():
    moves = (3, 19, 41)
    pre, per = naive_first_repeat(moves)
    need = pre + max(moves) + per - 1  # one value short of proving the period
    short = build_table(canonical_rule("subtraction", list(moves)), need_len=need, cap=need)
    assert short.period is None
    v = naive_sg(moves, need)
    ts = TableSet.of([short, TS.tables[2]])
    rows = [
        (0, [1, 2, need, need + 1]),
        (0, [need - 1, 5]),
        (0, [10**18]),
        (1, [need, 3]),  # nim has no table limit
        (0, []),
        (0, [3, need + 7, 1]),  # SG(3) != 0 before the bad heap
    ]
    assert v[3] != 0
    nim, bad, mh, mt = run(ts, rows)
    assert bad == [2, -1, 0, -1, -1, 1]
    assert nim == [0, v[need - 1] ^ v[5], 0, need ^ 3, 0, 0]
    for i in (0, 2, 5):  # rows with an unknown value get no move
        assert (mh[i], mt[i]) == (-1, -1)


def test_l_rows_get_no_move_even_with_mixed_tables():
    rows = [(t, [h, h]) for t in range(len(SPECS)) for h in (0, 5, 17, 10**18)]
    nim, bad, mh, mt = run(TS, rows)
    assert nim == [0] * len(rows) and bad == [-1] * len(rows)
    assert mh == [-1] * len(rows) and mt == [-1] * len(rows)


# ---------------------------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------------------------

HEAP_CAP = {"nim": 7, "half": 30, "subtraction": 25}


@st.composite
def rows_strategy(draw, specs):
    n = draw(st.integers(1, 2 * kernels.AHEAD_ROWS + 4))  # rows past the prefetch distance
    rows = []
    for _ in range(n):
        t = draw(st.integers(0, len(specs) - 1))
        cap = HEAP_CAP[specs[t][0]]
        hs = draw(st.lists(st.integers(0, cap), min_size=0, max_size=3))
        rows.append((t, hs))
    return rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy(SPECS))
def test_fixed_tables_property(rows):
    check_rows(SPECS, REFS, TS, rows)


@settings(max_examples=200, deadline=None)
@given(heaps=st.lists(st.tuples(st.integers(0, len(SPECS) - 1), st.integers(0, 40)),
                      min_size=kernels.AHEAD_HEAPS + 1, max_size=3 * kernels.AHEAD_HEAPS))
def test_sg_per_heap_matches_the_reference_past_the_prefetch_distance(heaps):
    tables = np.array([t for t, _ in heaps], np.int64)
    values = np.array([h for _, h in heaps], np.int64)
    got = kernels.sg_per_heap(values, tables, *TS.lookup_args())
    assert got.tolist() == [REFS[t](h) for t, h in heaps]


@st.composite
def random_rule_case(draw):
    specs = [("nim", ()), ("half", ())]
    for _ in range(draw(st.integers(1, 3))):
        moves = draw(st.lists(st.integers(1, 9), min_size=1, max_size=4))
        specs.append(("subtraction", tuple(sorted(set(moves)))))
    rows = draw(rows_strategy(specs))
    return specs, rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=random_rule_case())
def test_random_rules_property(case):
    specs, rows = case
    refs = [RefSG(k, m) for k, m in specs]
    ts = make_tables(specs)
    check_rows(specs, refs, ts, rows)


# ---------------------------------------------------------------------------------------------
# Large heaps (~10^18): legality and a zero reference nim-sum after the move
# ---------------------------------------------------------------------------------------------


def big_rows(seed, n_rows=400):
    rng = random.Random(seed)
    rows = []
    for _ in range(n_rows):
        t = rng.randrange(len(SPECS))
        k = rng.randint(1, 4)
        mode = rng.random()
        if mode < 0.6:
            hs = [rng.randrange(10**18 - 10**9, 10**18 + 10**9) for _ in range(k)]
        elif mode < 0.8:
            hs = [rng.randrange(0, MAX_HEAP + 1) for _ in range(k)]
        else:
            hs = [MAX_HEAP - rng.randrange(0, 100) for _ in range(k)]
        if rng.random() < 0.2:  # a losing position: a heap repeated
            hs = hs + [hs[0]]
        if SPECS[t][0] == "nim" and rng.random() < 0.3 and len(hs) >= 2:
            hs = hs + [hs[0] ^ hs[1]]  # nim-sum 0 by construction (still < 2^63)
        rows.append((t, hs))
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_big_heaps(seed):
    check_rows(SPECS, REFS, TS, big_rows(seed), brute=False)


def test_big_half_heaps_near_powers_of_two():
    rows = []
    for k in range(2, 63):
        for d in (-3, -2, -1, 0, 1, 2):
            h = 2**k + d
            if 0 <= h <= MAX_HEAP:
                rows.append((3, [h]))
                rows.append((3, [h, 2**k - 1]))
                rows.append((3, [h, 10**18]))
    rows.append((3, [MAX_HEAP]))
    rows.append((3, [MAX_HEAP - 1, MAX_HEAP]))
    check_rows(SPECS, REFS, TS, rows, brute=False)


def test_big_nim_heaps_exact_moves():
    a, b = 10**18 + 12345, 987654321987654321
    rows = [(2, [a]), (2, [a, b]), (2, [a, b, a ^ b]), (2, [MAX_HEAP, 1])]
    nim, bad, mh, mt = run(TS, rows)
    assert nim == [a, a ^ b, 0, MAX_HEAP ^ 1]
    assert bad == [-1] * 4
    assert (mh[0], mt[0]) == (0, a)
    assert (mh[2], mt[2]) == (-1, -1)
    check_rows(SPECS, REFS, TS, rows, brute=False)


def test_wide_value_dtype_table_mixed_with_closed_forms():
    # |S| = 300 needs a uint16 value array; SG(x) = x mod 301 for S = {1..300}
    specs = [("subtraction", tuple(range(1, 301))), ("nim", ()), ("subtraction", (2, 5))]
    refs = [RefSG(k, m) for k, m in specs]
    assert refs[0](1000) == 1000 % 301
    ts = make_tables(specs)
    assert ts.values.dtype == np.uint16
    small = [(t, [a, b]) for t in (0, 2) for a in range(12) for b in range(a, 12)]
    check_rows(specs, refs, ts, small)
    rng = random.Random(5)
    big = [(rng.randrange(3), [rng.randrange(0, MAX_HEAP) for _ in range(3)]) for _ in range(300)]
    big += [(0, [300, 10**18]), (0, [299, 301 * 10**15 + 299])]
    check_rows(specs, refs, ts, big, brute=False)


@pytest.mark.parametrize("m", [1, 2, 3, 64, 1000, 2**20 + 7, 2**32 - 1])
def test_window_power_is_the_rolling_hash_weight_modulo_2_to_the_64(m):
    base = 0x100000001B3
    assert int(kernels.window_power(m)) == pow(base, m - 1, 2**64)


# ---------------------------------------------------------------------------------------------
# Ordering kernels against numpy's stable lexsort
# ---------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 12)), max_size=200),
       bucket_type=st.sampled_from([np.int32, np.int64]),
       dest_type=st.sampled_from([np.int32, np.int64]))
def test_counting_sort_is_a_stable_sort_by_bucket_then_key(rows, bucket_type, dest_type):
    bucket = np.array([b for b, _ in rows], dtype=bucket_type)
    key = np.array([k for _, k in rows], dtype=np.int64)
    dest = np.empty(len(rows), dest_type)
    sorted_key, counts = kernels.counting_sort(bucket, 6, key, dest)
    order = np.lexsort((np.arange(len(rows)), key, bucket))
    expected_dest = np.empty(len(rows), np.int64)
    expected_dest[order] = np.arange(len(rows))
    assert dest.tolist() == expected_dest.tolist()
    assert sorted_key.tolist() == key[order].tolist()
    assert counts.tolist() == [sum(1 for b, _ in rows if b == c) for c in range(6)]
    assert kernels.scatter(key, dest).tolist() == key[order].tolist()
    assert kernels.is_identity(dest) == (order.tolist() == list(range(len(rows))))


@contextlib.contextmanager
def _on_threads(threads: int) -> Iterator[None]:
    """The kernels called in the block run on `threads` threads."""
    from pipeline.kernels.threads import get_num_threads, set_num_threads
    before = get_num_threads()
    set_num_threads(threads)
    try:
        yield
    finally:
        set_num_threads(before)


def _check_stable_sort(bucket: np.ndarray, key: np.ndarray, n_buckets: int, dest: np.ndarray,
                       sorted_key: np.ndarray, counts: np.ndarray) -> None:
    """A counting sort's outputs against numpy's stable lexsort of (bucket, key)."""
    order = np.lexsort((np.arange(key.shape[0]), key, bucket))
    expected_dest = np.empty(key.shape[0], np.int64)
    expected_dest[order] = np.arange(key.shape[0])
    assert np.array_equal(dest, expected_dest)
    assert np.array_equal(sorted_key, key[order])
    assert np.array_equal(counts, np.bincount(bucket, minlength=n_buckets))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("in_order_within", [True, False])
def test_counting_sort_in_chunks_per_thread_is_the_same_stable_sort(threads, in_order_within):
    """Past 64Ki rows a chunk per thread counts and scatters its own rows; numpy's stable
    lexsort is the reference, with keys ascending within buckets (exports) or not, and with
    buckets that only one chunk holds or none."""
    rng = np.random.default_rng(threads)
    n = 300_001
    bucket = rng.integers(0, 50, n).astype(np.int32)
    bucket[: n // 3] = np.where(bucket[: n // 3] == 7, 8, bucket[: n // 3])  # 7: late chunks
    bucket[bucket == 9] = 10  # 9: in no chunk
    key = (np.arange(n, dtype=np.int64) // 3 if in_order_within
           else rng.integers(-1000, 1000, n).astype(np.int64))
    dest = np.empty(n, np.int64)
    with _on_threads(threads):
        sorted_key, counts = kernels.counting_sort(bucket, 51, key, dest)
    _check_stable_sort(bucket, key, 51, dest, sorted_key, counts)


def _cut(array: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    """`array` in parts at the sorted positions `cuts` (empty parts where cuts repeat)."""
    return np.split(array, sorted(c % (array.shape[0] + 1) for c in cuts))


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 12)), max_size=200),
       cuts=st.lists(st.integers(0, 200), max_size=5),
       dest_type=st.sampled_from([np.int32, np.int64]))
def test_counting_sort_of_parts_is_the_stable_sort_of_their_rows(rows, cuts, dest_type):
    # The rows of parts one after another (some parts empty), against numpy's stable lexsort
    # of the joined rows: keys out of order within buckets and repeated.
    bucket = np.array([b for b, _ in rows], dtype=np.int32)
    key = np.array([k for _, k in rows], dtype=np.int64)
    dest = np.empty(len(rows), dest_type)
    sorted_key, counts, may_repeat = kernels.counting_sort_parts(
        _cut(bucket, cuts), 6, _cut(key, cuts), dest)
    _check_stable_sort(bucket, key, 6, dest, sorted_key, counts)
    if len(set(rows)) < len(rows):  # a repeat is never missed; none claimed in strict order
        assert may_repeat
    if all(a < b for a, b in zip(rows, rows[1:])):
        assert not may_repeat


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("in_order_within", [True, False])
def test_counting_sort_of_parts_in_chunks_per_thread(threads, in_order_within):
    """Parts whose edges fall anywhere in the threads' chunks (one part longer than a chunk,
    short ones, an empty one), keys in order within buckets or not, against numpy."""
    rng = np.random.default_rng(10 + threads)
    n = 300_001
    bucket = rng.integers(0, 50, n).astype(np.int32)
    bucket[bucket == 9] = 10  # 9: in no part
    key = (np.arange(n, dtype=np.int64) // 3 if in_order_within
           else rng.integers(-1000, 1000, n).astype(np.int64))
    cuts = [7, 7, 65_536, 65_537, 99_999, 200_000, 299_999]
    dest = np.empty(n, np.int32)
    with _on_threads(threads):
        sorted_key, counts, may_repeat = kernels.counting_sort_parts(
            _cut(bucket, cuts), 51, _cut(key, cuts), dest)
    _check_stable_sort(bucket, key, 51, dest, sorted_key, counts)
    assert may_repeat  # keys // 3 repeat within a bucket; random keys are out of order


@pytest.mark.parametrize("repeat_at", [None, 0, 65_535, 299_949])
def test_counting_sort_of_parts_says_whether_keys_may_repeat(repeat_at):
    # Keys strictly ascending within every bucket (each rule set's ids as exported), on
    # three threads, with one key given twice in the first, a middle or the last bucket.
    n = 300_000
    bucket = (np.arange(n) % 50).astype(np.int32)
    key = np.arange(n, dtype=np.int64)
    if repeat_at is not None:
        key[repeat_at + 50] = key[repeat_at]  # the same bucket's next row
    with _on_threads(3):
        _, _, may_repeat = kernels.counting_sort_parts(
            _cut(bucket, [1000, 70_000]), 50, _cut(key, [1000, 70_000]),
            np.empty(n, np.int32))
    assert may_repeat == (repeat_at is not None)


def test_counting_sort_of_parts_refuses_parts_that_do_not_match():
    one = [np.zeros(3, np.int32)]
    with pytest.raises(ValueError, match="buckets and keys differ"):
        kernels.counting_sort_parts(one, 1, [np.zeros(2, np.int64)], np.empty(3, np.int32))
    with pytest.raises(ValueError, match="rows and dest differ"):
        kernels.counting_sort_parts(one, 1, [np.zeros(3, np.int64)], np.empty(4, np.int32))
    for bucket in (-1, 1):  # n_buckets is 1: only bucket 0 exists
        with pytest.raises(ValueError, match="a bucket outside 0 .. n_buckets - 1"):
            kernels.counting_sort_parts([np.array([0, bucket, 0], np.int32)], 1,
                                        [np.zeros(3, np.int64)], np.empty(3, np.int32))
    with pytest.raises(TypeError, match="got uint64"):
        kernels.counting_sort_parts(one, 1, [np.zeros(3, np.uint64)], np.empty(3, np.int32))


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=60))
def test_adjacent_duplicates_flags_every_copy_of_a_repeated_key(keys):
    keys = sorted(keys)
    a = np.array([k for k, _ in keys], np.int64)
    b = np.array([k for _, k in keys], np.int64)
    expected = [keys.count(k) > 1 for k in keys]
    assert kernels.adjacent_duplicates(a, b).tolist() == expected


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_adjacent_duplicates_on_threads_across_their_chunks(threads):
    """Past the one-thread size, repeats at every chunk edge of 1-3 threads: numpy's count."""
    rng = np.random.default_rng(threads)
    a = np.sort(rng.integers(0, 40_000, 300_000)).astype(np.int64)
    b = np.zeros(a.shape[0], np.int64)
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    with _on_threads(threads):
        got = kernels.adjacent_duplicates(a, b)
    assert np.array_equal(got, counts[inverse] > 1)


def test_counting_sort_of_rows_already_in_order_is_identity():
    bucket = np.repeat(np.arange(4, dtype=np.int32), 5)
    key = np.tile(np.arange(5, dtype=np.int64), 4)
    dest = np.empty(20, np.int32)
    kernels.counting_sort(bucket, 4, key, dest)
    assert kernels.is_identity(dest)
    assert not kernels.is_identity(dest[::-1].copy())


# texts sharing long prefixes (ties over several 8-byte chunks), ending inside or at a chunk's
# end, holding zero bytes and bytes on both sides of 0x80; rows are drawn from a small pool so
# that equal texts in one bucket are common (which of them comes first is what a duplicate's
# report names)
chunky_text = st.lists(st.sampled_from([b"", b"\x00" * 8, b"abcdefg", b"abcdefgh", b"abcdefghi",
                                        b"\x01", b"\x7f", b"\x80", b"\xff"]),
                       max_size=6).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), bucket_type=st.sampled_from([np.uint8, np.int32, np.int64]),
       offset_type=st.sampled_from([np.int32, np.int64]))
def test_text_key_order_is_a_stable_sort_by_bucket_then_bytes(data, bucket_type, offset_type):
    """Python's stable sort on (bucket, bytes) is the reference: the kernel's 8-byte chunks
    must order a text before every longer text it begins, high bytes after low ones, and
    equal texts in their input order."""
    pool = data.draw(st.lists(chunky_text, min_size=1, max_size=12))
    rows = data.draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(pool)),
                              min_size=data.draw(st.sampled_from([0, 200])), max_size=400))
    text = np.frombuffer(b"".join(t for _, t in rows), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(t) for _, t in rows])]).astype(offset_type)
    bucket = np.array([b for b, _ in rows], dtype=bucket_type)
    order, counts = kernels.text_key_order(bucket, 4, offsets, text)
    assert order.tolist() == sorted(range(len(rows)), key=lambda i: rows[i])
    assert counts.tolist() == [sum(1 for b, _ in rows if b == c) for c in range(4)]


def _cut_pieces(data, rows):
    """The rows' texts as Arrow (offsets, bytes) pieces cut anywhere (empty ones too), each
    piece's offsets starting past 0 and its bytes running past its last text."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=4)))
    pieces = []
    for lo, hi in zip([0, *cuts], [*cuts, len(rows)]):
        pad = data.draw(st.integers(0, 3))
        texts = [t for _, t in rows[lo:hi]]
        pieces.append((pad + np.concatenate([[0], np.cumsum([len(t) for t in texts])]),
                       np.frombuffer(b"\xee" * pad + b"".join(texts) + b"\xee", np.uint8)))
    return pieces


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_text_run_order_moves_the_texts_into_a_stable_sort(data):
    """Python's stable sort on (bucket, bytes) is the reference, as for `text_key_order`:
    the texts come back in that order (offsets from 0), with order[j] the row at place j,
    from pieces cut anywhere (empty ones too) whose offsets need not start at 0."""
    pool = data.draw(st.lists(chunky_text, min_size=1, max_size=12))
    rows = data.draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(pool)),
                              min_size=data.draw(st.sampled_from([0, 200])), max_size=400))
    pieces = _cut_pieces(data, rows)
    bucket = np.array([b for b, _ in rows], np.int32)
    lengths = np.array([len(t) for _, t in rows], np.int64)
    offsets, text, order, counts = kernels.text_run_order(bucket, 4, lengths, iter(pieces))
    expected = sorted(range(len(rows)), key=lambda i: rows[i])
    assert order.tolist() == expected
    assert offsets[0] == 0 and offsets[-1] == text.shape[0]
    assert [bytes(text[a:b]) for a, b in zip(offsets[:-1], offsets[1:])] == [
        rows[i][1] for i in expected]
    assert counts.tolist() == [sum(1 for b, _ in rows if b == c) for c in range(4)]

@settings(max_examples=200, deadline=None)
@given(st.data())
def test_text_run_order_reads_polars_string_views_where_they_lie(data):
    """Pieces in polars' own layout (`buffers.text_views`: Arrow string views, texts of at
    most 12 bytes inline, longer ones in data buffers, a piece a slice of a column joined
    from several) give what the same texts as offsets and bytes give: Python's stable sort on
    (bucket, UTF-8 bytes)."""
    import polars as pl

    from pipeline.transforms.buffers import text_views

    words = st.text(alphabet=st.sampled_from("ab\u00e9\u4e2dz0"), max_size=20)
    texts = data.draw(st.lists(words, max_size=300))
    bucket = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(texts),
                                         max_size=len(texts))), np.int32)
    half = len(texts) // 2
    column = pl.concat([pl.Series(["x" * 30] + texts[:half]), pl.Series(texts[half:])],
                       rechunk=False)[1:]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(texts)), max_size=3)))
    pieces = [text_views(column[lo:hi]) for lo, hi in zip([0, *cuts], [*cuts, len(texts)])]
    assert all(p is not None and p[0] == "views" for p in pieces)
    lengths = np.array([len(t.encode()) for t in texts], np.int64)
    offsets, text, order, counts = kernels.text_run_order(bucket, 4, lengths, iter(pieces))
    rows = [(int(b), t.encode()) for b, t in zip(bucket, texts)]
    expected = sorted(range(len(rows)), key=lambda i: rows[i])
    assert order.tolist() == expected
    assert [bytes(text[a:b]) for a, b in zip(offsets[:-1], offsets[1:])] == [
        rows[i][1] for i in expected]
    assert counts.tolist() == [int((bucket == c).sum()) for c in range(4)]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), bucket_type=st.sampled_from([np.uint8, np.int32, np.int64]))
def test_text_key_order_at_sorts_texts_by_address_as_text_key_order(data, bucket_type):
    """Texts given by address and length (`text_addresses` of pieces as offsets and bytes,
    cut anywhere, offsets not starting at 0): Python's stable sort on (bucket, bytes) is the
    reference, with the bytes `chunky_text` draws (not UTF-8, zero bytes, long ties)."""
    pool = data.draw(st.lists(chunky_text, min_size=1, max_size=12))
    rows = data.draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(pool)),
                              min_size=data.draw(st.sampled_from([0, 200])), max_size=400))
    ptrs, lens, kept = kernels.text_addresses(iter(_cut_pieces(data, rows)), len(rows))
    bucket = np.array([b for b, _ in rows], dtype=bucket_type)
    order, counts = kernels.text_key_order_at(bucket, 4, ptrs, lens)
    assert order.tolist() == sorted(range(len(rows)), key=lambda i: rows[i])
    assert counts.tolist() == [sum(1 for b, _ in rows if b == c) for c in range(4)]
    assert lens.tolist() == [len(t) for _, t in rows]


# texts on both sides of a string view's inline limit (12 bytes), alike in their first four
# bytes (a view's prefix) and in their length, so that only the bytes after tell them apart
view_text = st.sampled_from(["", "abcd", "abcdefghijkl", "abcdefghijkm", "abcdefghijklm",
                             "abcdefghijkln", "abcd\u00e9fghijklm", "\u4e2d" * 5, "z" * 40,
                             "z" * 39 + "y"])


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_text_addresses_read_polars_string_views_where_they_lie(data):
    """A column of several chunks, sliced (`buffers.text_pieces`): each address and length
    reads back that row's UTF-8 bytes, inline in its view or in a data buffer; sorting by
    them is Python's stable sort on (bucket, bytes)."""
    import ctypes

    import polars as pl

    from pipeline.transforms.buffers import text_pieces

    texts = data.draw(st.lists(view_text, max_size=300))
    half = len(texts) // 2
    column = pl.concat([pl.Series(["x" * 30] + texts[:half]),
                        pl.Series(texts[half:], dtype=pl.String)], rechunk=False)[1:]
    ptrs, lens, kept = kernels.text_addresses(text_pieces(column), len(texts))
    assert [ctypes.string_at(int(p), int(n)) for p, n in zip(ptrs, lens)] == [
        t.encode() for t in texts]
    bucket = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(texts),
                                         max_size=len(texts))), np.int32)
    order, _ = kernels.text_key_order_at(bucket, 4, ptrs, lens)
    rows = [(int(b), t.encode()) for b, t in zip(bucket, texts)]
    assert order.tolist() == sorted(range(len(rows)), key=lambda i: rows[i])


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_sorted_view_repeats_marks_each_row_whose_key_a_neighbour_has(data):
    """Rows sorted by (bucket, text) in string views, as the column polars gathers: a row
    is marked exactly when the row before or after it has the same bucket and text (the
    reference compares the Python strings)."""
    import polars as pl

    from pipeline.transforms.buffers import string_views

    rows = sorted(data.draw(st.lists(st.tuples(st.integers(0, 3), view_text), max_size=300)),
                  key=lambda r: (r[0], r[1].encode()))
    counts = np.array([sum(1 for b, _ in rows if b == c) for c in range(4)], np.int64)
    texts = [t for _, t in rows]
    half = len(texts) // 2
    column = pl.concat([pl.Series(texts[:half], dtype=pl.String),
                        pl.Series(texts[half:], dtype=pl.String)], rechunk=False)
    repeated = kernels.sorted_view_repeats(counts, *string_views(column))
    expected = [(j > 0 and rows[j - 1] == rows[j]) or (j + 1 < len(rows) and rows[j + 1] == rows[j])
                for j in range(len(rows))]
    assert repeated.tolist() == expected


def test_text_sort_and_repeats_split_between_threads_as_on_one():
    """Enough rows (2^18) for the counting pass and the repeats to run in a chunk per
    thread: Python's stable sort on (bucket, bytes) and its neighbours are the reference,
    with empty buckets, texts of 11 to 13 bytes (inline or not) and many repeats."""
    import polars as pl

    from pipeline.transforms.buffers import string_views, text_pieces

    rng = np.random.default_rng(5)
    n = 1 << 18
    texts = [("k" * int(w)) + str(int(v)) for w, v in zip(rng.integers(9, 12, n),
                                                       rng.integers(0, 300, n))]
    bucket = rng.choice(np.array([0, 1, 3, 6], np.int32), n)  # buckets 2, 4, 5 empty
    column = pl.concat([pl.Series(texts[:n // 3]), pl.Series(texts[n // 3:])], rechunk=False)
    ptrs, lens, kept = kernels.text_addresses(text_pieces(column), n)
    before = kernels.get_num_threads()
    kernels.set_num_threads(2)
    try:
        order, counts = kernels.text_key_order_at(bucket, 7, ptrs, lens)
        rows = [(int(b), t.encode()) for b, t in zip(bucket, texts)]
        expected = sorted(range(n), key=lambda i: rows[i])
        assert order.tolist() == expected
        ordered = [rows[i] for i in expected]
        repeated = kernels.sorted_view_repeats(
            counts, *string_views(pl.Series([t.decode() for _, t in ordered])))
    finally:
        kernels.set_num_threads(before)
    assert repeated.tolist() == [
        (j > 0 and ordered[j - 1] == ordered[j]) or (j + 1 < n and ordered[j + 1] == ordered[j])
        for j in range(n)]


def test_sorted_view_repeats_refuses_counts_that_do_not_match_the_rows():
    import polars as pl

    from pipeline.transforms.buffers import string_views

    with pytest.raises(ValueError, match="counts do not match"):
        kernels.sorted_view_repeats(np.array([1, 1]), *string_views(pl.Series(["a"])))


def _segmented(rows, cuts, pad):
    """A run's sorted (bucket, text) rows as segments cut at `cuts`, each segment's texts
    at offset `pad` in its bytes (as in a slice of a larger Arrow array)."""
    segments = []
    for lo, hi in zip([0, *cuts], [*cuts, len(rows)]):
        piece = rows[lo:hi]
        offsets = pad + np.concatenate([[0], np.cumsum([len(t) for _, t in piece])])
        data = np.frombuffer(b"\xee" * pad + b"".join(t for _, t in piece) + b"\xee",
                             np.uint8)
        segments.append((np.array([b for b, _ in piece], np.int32), offsets.astype(np.int64),
                         data))
    return segments


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_merge_text_runs_is_a_stable_sort_of_the_runs(data):
    """Python's stable sort of the runs one after another is the reference: the merge must
    give its rows (bytes, then shorter first, as `text_key_order`), equal keys in run order
    (also within a run), empty runs and segments anywhere, and count the rows equal to the
    row before them."""
    pool = data.draw(st.lists(chunky_text, min_size=1, max_size=8))
    runs = data.draw(st.lists(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(pool)),
                                       max_size=40).map(sorted), max_size=6))
    segmented = []
    for rows in runs:
        cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))
        segmented.append(_segmented(rows, cuts, data.draw(st.integers(0, 3))))
    flat = [row for rows in runs for row in rows]
    bucket, offsets, text, order, repeats = kernels.merge_text_runs(segmented)
    expected = sorted(range(len(flat)), key=lambda i: flat[i])
    assert order.tolist() == expected
    assert bucket.tolist() == [flat[i][0] for i in expected]
    assert [bytes(text[a:b]) for a, b in zip(offsets[:-1], offsets[1:])] == [
        flat[i][1] for i in expected]
    assert offsets[0] == 0 and offsets[-1] == text.shape[0]
    assert repeats == sum(flat[a] == flat[b] for a, b in zip(expected, expected[1:]))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_merge_int_runs_is_a_stable_sort_of_the_runs(data):
    """`merge_text_runs`' reference for integer keys (negative and extreme ones included)."""
    keys = st.sampled_from([-(2**63), -1, 0, 1, 7, 2**63 - 1])
    runs = data.draw(st.lists(st.lists(st.tuples(st.integers(0, 3), keys), max_size=40
                                       ).map(sorted), max_size=6))
    segmented = []
    for rows in runs:
        cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))
        segmented.append([(np.array([b for b, _ in rows[lo:hi]], np.int32),
                           np.array([k for _, k in rows[lo:hi]], np.int64))
                          for lo, hi in zip([0, *cuts], [*cuts, len(rows)])])
    flat = [row for rows in runs for row in rows]
    bucket, key, order, repeats = kernels.merge_int_runs(segmented)
    expected = sorted(range(len(flat)), key=lambda i: flat[i])
    assert order.tolist() == expected
    assert list(zip(bucket.tolist(), key.tolist())) == [flat[i] for i in expected]
    assert repeats == sum(flat[a] == flat[b] for a, b in zip(expected, expected[1:]))


def test_merge_runs_of_many_rows_match_numpy_lexsort():
    """Nine runs of 20,000 random rows (hex-like texts sharing their first 8 bytes in
    places, so that the full comparison decides), against numpy's lexsort."""
    rng = np.random.default_rng(5)
    texts = [(b"prefix00" if i % 3 else b"") + rng.bytes(rng.integers(0, 6)).hex().encode()
             for i in range(180_000)]
    bucket = rng.integers(0, 50, len(texts)).astype(np.int32)
    runs, ints = [], []
    for lo in range(0, len(texts), 20_000):
        rows = sorted(zip(bucket[lo:lo + 20_000].tolist(), texts[lo:lo + 20_000]))
        runs.append(_segmented(rows, [7_000], 0))
        pairs = sorted(zip(bucket[lo:lo + 20_000].tolist(),
                           rng.integers(-1000, 1000, 20_000).tolist()))
        ints.append([(np.array([b for b, _ in pairs], np.int32),
                      np.array([k for _, k in pairs], np.int64))])
    flat_b = np.concatenate([s[0] for r in runs for s in r])
    flat_t = [bytes(d[o[i]:o[i + 1]]) for r in runs for _, o, d in r
              for i in range(o.shape[0] - 1)]
    _, _, _, order, _ = kernels.merge_text_runs(runs)
    width = max(len(t) for t in flat_t)
    padded = np.array([t.ljust(width, b"\x00") + bytes([len(t)]) for t in flat_t],
                      f"S{width + 1}")
    assert np.array_equal(order, np.lexsort((np.arange(len(flat_t)), padded, flat_b)))
    flat_b = np.concatenate([r[0][0] for r in ints])
    flat_k = np.concatenate([r[0][1] for r in ints])
    _, _, order, repeats = kernels.merge_int_runs(ints)
    assert np.array_equal(order, np.lexsort((np.arange(len(flat_k)), flat_k, flat_b)))
    assert repeats == int(np.sum((np.diff(flat_b[order]) == 0) & (np.diff(flat_k[order]) == 0)))


# ---------------------------------------------------------------------------------------------
# Heaps text: the kernel reads plain lists and leaves every other row to the exact grammar
# ---------------------------------------------------------------------------------------------


def text_buffers(texts):
    """Arrow-style (offsets, UTF-8 bytes) of a list of strings."""
    data = [t.encode() for t in texts]
    offsets = np.zeros(len(data) + 1, np.int64)
    offsets[1:] = np.cumsum([len(d) for d in data])
    return offsets, np.frombuffer(b"".join(data), np.uint8).copy()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(
    st.lists(st.one_of(st.integers(0, 10**17).map(str), st.sampled_from(["", " ", "\t"])),
             min_size=1, max_size=5),
    st.sampled_from([",", ", ", " , ", "\t,"]), st.booleans()), max_size=8))
def test_heap_text_lists_leaves_empty_elements_to_the_exact_grammar(rows):
    texts, expected = [], []
    for elements, sep, brackets in rows:
        text = sep.join(elements)
        texts.append(f"[{text}]" if brackets else text)
        blank = [not e.strip() for e in elements]
        expected.append(None if len(elements) > 1 and any(blank)
                        else [int(e) for e, b in zip(elements, blank) if not b])
    counts, values, slow = kernels.heap_text_lists(*text_buffers(texts))
    assert slow.tolist() == [i for i, e in enumerate(expected) if e is None]
    for i, heaps in enumerate(expected):
        got = values[counts[i]:counts[i + 1]].tolist()
        assert got == (heaps if heaps is not None else []), texts[i]


@given(st.lists(st.lists(st.integers(0, 9), max_size=6), max_size=40),
       st.sampled_from([" ", ","]), st.integers(0, 3))
def test_heap_text_lists_of_the_densest_text_its_bytes_can_hold(rows, sep, cut):
    """One-digit heaps and one-byte separators: as many heaps as the bytes can hold (the
    room the one pass sets aside), from offsets that start past 0 (a slice), exact."""
    texts = ["9" * cut] + [sep.join(map(str, r)) for r in rows]
    offsets, data = text_buffers(texts)
    counts, values, slow = kernels.heap_text_lists(offsets[1:], data)
    assert slow.tolist() == []
    assert [values[counts[i]:counts[i + 1]].tolist() for i in range(len(rows))] == rows


_SEPARATORS = ["", " ", ",", "\t"]
_NOT_DIGITS = ["/", ":", "+", "-", "a", "\x00", "\xfa", "\xff", "\u00e9"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 21), st.sampled_from(_SEPARATORS), st.integers(0, 12)),
                min_size=1, max_size=6),
       st.one_of(st.none(), st.tuples(st.integers(0, 5), st.sampled_from(_NOT_DIGITS))),
       st.integers(0, 2**32 - 1))
def test_heap_text_lists_reads_numbers_of_every_length_up_to_any_byte(numbers, junk, seed):
    """Numbers of 1 to 21 digits (read 8 bytes at a time where 8 are left in the cell), each
    followed by a separator, and perhaps one by a byte that ends the digits without being a
    separator: '/' and ':' (next to '0' and '9'), bytes that carry when 6 is added
    (0xFA-0xFF), NUL. The cell's heaps are the integers, or it is left to the exact grammar
    (slow): against Python."""
    rng = np.random.default_rng(seed)
    tokens, heaps = [], []
    plain = junk is None or junk[0] >= len(numbers)
    for i, (digits, after, pad) in enumerate(numbers):
        text = str(rng.integers(1, 10)) + "".join(map(str, rng.integers(0, 10, digits - 1)))
        if junk is not None and junk[0] == i:
            after = junk[1]
        tokens.append(text + after + " " * pad)
        plain &= digits <= 18
        heaps.append(int(text))
    cell = " ".join(tokens).rstrip()
    plain &= not cell.endswith(",")
    data = cell.encode("latin-1")  # 0xFA as the byte 0xFA
    counts, values, slow = kernels.heap_text_lists(np.array([0, len(data)], np.int64),
                                                   np.frombuffer(data, np.uint8))
    if plain:
        assert slow.tolist() == [] and values[counts[0]:counts[1]].tolist() == heaps, cell
    else:
        assert slow.tolist() == [0], cell


_CELL = st.one_of(
    st.lists(st.integers(0, 10**12), max_size=6).map(lambda r: (" ".join(map(str, r)), r)),
    st.text(" ,[]-+0123456789\u00e9x", max_size=30).map(lambda t: (t, None)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_CELL, max_size=30), st.integers(0, 30))
def test_text_kernels_read_polars_string_views_where_they_lie(cells, half):
    """The cells in polars' own layout (string views: inline up to 12 bytes, else in one of
    several data buffers; a sliced column) give what the same cells as offsets and bytes
    give, and the heaps a plain list of integers holds."""
    import polars as pl

    from pipeline.transforms.buffers import text_buffers, text_views

    texts = [t for t, _ in cells]
    column = pl.concat([pl.Series(["x" * 30] + texts[:half]),
                        pl.Series(texts[half:], dtype=pl.String)], rechunk=False).rechunk()[1:]
    views = text_views(column)
    assert views is not None and views[0] == "views"
    copied = text_buffers(column)
    counts, values, slow = kernels.heap_text_lists(*views)
    want = kernels.heap_text_lists(*copied)
    assert counts.tolist() == want[0].tolist() and values.tolist() == want[1].tolist()
    assert slow.tolist() == want[2].tolist()
    for i, (_, heaps) in enumerate(cells):
        if heaps is not None:
            assert values[counts[i]:counts[i + 1]].tolist() == heaps
    got, exact = kernels.int_text_values(*views)
    want_values, want_exact = kernels.int_text_values(*copied)
    assert exact == want_exact and (not exact or got.tolist() == want_values.tolist())
    assert kernels.needs_strip(*views) == kernels.needs_strip(*copied)


def test_integer_keys_read_from_string_views():
    import polars as pl

    from pipeline.transforms.buffers import text_views

    column = pl.Series(["12", " -7", "123456789012345678", "0", "40000000000000"])
    values, exact = kernels.int_text_values(*text_views(column))
    assert exact and values.tolist() == [12, -7, 123456789012345678, 0, 40000000000000]
    assert kernels.needs_strip(*text_views(column))
    assert not kernels.int_text_values(*text_views(pl.Series(["12", "012"])))[1]


def test_text_kernels_refuse_a_string_view_out_of_its_buffers():
    import polars as pl

    from pipeline.transforms.buffers import text_views

    _, views, buffers = text_views(pl.Series(["a text longer than twelve bytes", "5"]))
    bad = views.copy()
    bad[0, 3] = buffers[0].shape[0]  # starts where its buffer ends
    with pytest.raises(ValueError, match="out of its buffers"):
        kernels.heap_text_lists("views", bad, buffers)
    bad = views.copy()
    bad[0, 2] = len(buffers)  # a buffer there is not
    with pytest.raises(ValueError, match="out of its buffers"):
        kernels.needs_strip("views", bad, buffers)


@pytest.mark.parametrize("text", ["5,,6", ",", "[,]", ",5", "5,", "[5,]", "5, ,6", " , "])
def test_heap_text_lists_never_reads_an_empty_element_as_a_separator(text):
    counts, values, slow = kernels.heap_text_lists(*text_buffers([text, "5 , 6"]))
    assert slow.tolist() == [0]
    assert values[counts[1]:counts[2]].tolist() == [5, 6]


# CSV scan: records, quoted line breaks and open quotes, against two CSV parsers
# ---------------------------------------------------------------------------------------------


def _python_csv_records(text: str) -> list[list[str]]:
    """Python's csv module (non-strict: a quote opens a field only at its start, "" inside
    quotes is a quote, text after a closing quote is kept); blank lines come back empty."""
    import csv
    import io as stdio

    return [row for row in csv.reader(stdio.StringIO(text, newline="")) if row]


def _pyarrow_records(text: str) -> list[list[str]] | None:
    """pyarrow's reader, every record kept (None where it refuses the text)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    skipped = []
    try:
        table = pacsv.read_csv(
            pa.py_buffer(text.encode()),
            read_options=pacsv.ReadOptions(autogenerate_column_names=True, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=True,
                                             invalid_row_handler=lambda r: skipped.append(r)
                                             or "skip"),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=False,
                                                 quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, ValueError):
        return None
    types = {name: pa.string() for name in table.column_names}
    rows = [list(r.values()) for r in table.cast(pa.schema(types)).to_pylist()]
    return rows + [[]] * len(skipped)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet='a,"\r\n', max_size=40))
def test_csv_scan_counts_records_and_quoted_breaks_as_csv_parsers_do(text):
    data = np.frombuffer(text.encode(), np.uint8)
    records, end, open_line, quoted_break, *_ = kernels.csv_scan(data, 0, 0)
    assert end == len(data)
    if open_line:
        return  # a field open to the end: parsers close it silently; see the cases below
    rows = _python_csv_records(text)
    assert records == len(rows)
    assert quoted_break == any("\r" in f or "\n" in f for row in rows for f in row)
    by_arrow = _pyarrow_records(text)
    if by_arrow is not None:
        assert records == len(by_arrow)


def _strict_csv_accepts(text: str) -> bool:
    """Whether Python's csv module in strict mode (a closing quote must be followed by a
    comma or a line end) reads the text."""
    import csv
    import io as stdio

    try:
        list(csv.reader(stdio.StringIO(text, newline=""), strict=True))
    except csv.Error:
        return False
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet='a,"\r\n', max_size=40))
def test_csv_scan_flags_only_what_strict_csv_refuses(text):
    """A flagged text-after-a-closing-quote is always one strict CSV refuses; text strict CSV
    reads is never flagged."""
    data = np.frombuffer(text.encode(), np.uint8)
    stray_line = kernels.csv_scan(data, 0, 0)[4]
    if stray_line:
        assert not _strict_csv_accepts(text)
    if _strict_csv_accepts(text):
        assert stray_line == 0


@pytest.mark.parametrize(("text", "stray_line"), [
    ('a\n1,"5\n1,1,6\n1,2,"7\n', 2),   # two open quotes closing each other
    ('"x\r\ny"z\n', 1),                  # CRLF inside, text after the close
    ('a\r"b\rc""d"e', 2),                # an escaped quote is no close
    ('"5\n"\n', 0), ('"2\n, 3"', 0),      # a line break inside, then a line end or the end
    ('"5\n",x\n', 0),                     # then a comma
    ('"5"x\n', 0),                         # on one line: text after the quote is kept
    ('"a\nb"\n"c"d\n', 0),                # the field with text after it is on one line
])
def test_csv_scan_finds_text_after_the_close_of_a_field_holding_a_line_break(text,
                                                                             stray_line):
    data = np.frombuffer(text.encode(), np.uint8)
    assert kernels.csv_scan(data, 0, 0)[4] == stray_line


@pytest.mark.parametrize(("text", "open_line"), [
    ('"', 1), ('a\n"b', 2), ('a\r"b\r\nc', 2), ('a,"b""', 1), ('a,"b"""', 0), ('a"b', 0),
    ('"a"b"c', 0), ('\r\n\r\n"', 3), ('"a\r\rb', 1), ('x,"a\nb"\n"', 3), ('a,b"\n"', 2),
])
def test_csv_scan_finds_the_line_of_a_quote_never_closed(text, open_line):
    data = np.frombuffer(text.encode(), np.uint8)
    assert kernels.csv_scan(data, 0, 0)[2] == open_line


@pytest.mark.parametrize(("text", "records", "open_line"), [
    (" \n\t\na\n", 1, 0), ("a\n \t \r\n \r", 1, 0), ("  ", 0, 0),  # spaces and tabs: blank
    (" ,\n", 1, 0), ("\t\tx", 1, 0),                                  # but not with more
    (' "a\nb"\n', 2, 0), ('a, "b\n', 1, 0),       # a quote after spaces is a plain character
    (' \n"a\n', 1, 2),                            # one at a field's start opens it
])
def test_csv_scan_takes_lines_of_spaces_and_tabs_for_blank(text, records, open_line):
    data = np.frombuffer(text.encode(), np.uint8)
    assert kernels.csv_scan(data, 0, 0)[0] == records
    assert kernels.csv_scan(data, 0, 0)[2] == open_line


@pytest.mark.parametrize(("text", "stop", "expected"), [
    ("a,b\n1,2\n", 1, (1, 4)), ("\n\r\na,b\r1", 1, (1, 7)), ('"a\nb",c\r\n1', 1, (1, 9)),
    ("a,b", 1, (1, 3)), ("a\nb\nc\n", 2, (2, 4)), ("a\nb\n", 5, (2, 4)),
    (" \n\t\r\na,b\n1", 1, (1, 9)), ("  \n", 0, (0, 3)),
])
def test_csv_scan_stops_after_a_record(text, stop, expected):
    data = np.frombuffer(text.encode(), np.uint8)
    assert kernels.csv_scan(data, 0, stop)[:2] == expected


def _python_csv_longest(text: str) -> tuple[int, int]:
    """(characters, first physical line) of the longest record Python's csv module reads,
    its line end and any blank line counted: the lines it pulls from the text for each."""
    import csv
    import io as stdio

    pulled = [0]

    def lines():
        for line in stdio.StringIO(text, newline=""):
            pulled[0] += len(line)
            yield line

    reader = csv.reader(lines())
    longest, longest_line, before, line_before = 0, 0, 0, 0
    for _ in reader:
        if pulled[0] - before > longest:
            longest, longest_line = pulled[0] - before, line_before + 1
        before, line_before = pulled[0], reader.line_num
    return longest, longest_line


def _walk_in_parts(data: np.ndarray, cuts: list[int]) -> tuple[int, int]:
    """(longest, its line) from `csv_scan_part` over `data` cut at `cuts`, each part after
    the bytes the previous walk left, as `csv_reader._scan_parts` feeds it."""
    state, line, open_line, quoted, stray, field_break = 0, 1, 0, False, 0, False
    line_start, start_line, longest, longest_line = 0, 1, 0, 0
    offset, bounds = 0, [*sorted(set(cuts)), len(data)]
    for end in bounds:
        part = data[offset:end]
        last = end == len(data)
        limit = len(part) if last else max(len(part) - 1, 0)
        (done, state, line, open_line, quoted, stray, field_break, line_start, start_line,
         longest, longest_line) = kernels.csv_scan_part(
            part, limit, state, line, open_line, quoted, stray, field_break, offset,
            line_start, start_line, longest, longest_line)
        offset += done
    if len(data) - line_start > longest:
        longest, longest_line = len(data) - line_start, start_line
    return longest, longest_line


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet='a,"\r\n', max_size=40), st.lists(st.integers(0, 40), max_size=4))
def test_csv_scan_finds_the_longest_record_as_python_csv_reads_them(text, cuts):
    """Longest record (its line end, quoted line breaks and blank lines counted) and the
    line it starts on, whole and walked in parts cut anywhere."""
    data = np.frombuffer(text.encode(), np.uint8)
    scan = kernels.csv_scan(data, 0, 0)
    if scan[2]:
        return  # a field open to the end: refused before any record length matters
    expected = _python_csv_longest(text)
    assert scan[5:] == expected
    assert _walk_in_parts(data, [c for c in cuts if c < len(data)]) == expected


@settings(deadline=None)  # the first example compiles the kernel (258 ms on a loaded machine)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), max_size=30))
def test_in_key_order_is_lexicographic_order(pairs):
    first = np.array([a for a, _ in pairs], np.int64)
    second = np.array([b for _, b in pairs], np.int64)
    assert kernels.in_key_order(first, second) == (pairs == sorted(pairs))


@given(rows=st.lists(st.tuples(st.integers(-2, 4), st.integers(0, 3)), max_size=60),
       nim_type=st.sampled_from([np.uint8, np.uint16, np.uint32, np.int64, np.int32]),
       id_type=st.sampled_from([np.int64, np.uint16]))
def test_run_counts_are_the_rows_and_zero_nim_sums_of_each_id(rows, nim_type, id_type):
    """Per id of sorted ids: (id, rows, rows with nim sum 0), the nim sums in any of the
    types the verdicts hold them in (narrow ones taken as they are), against a count by
    hand."""
    rows = sorted(rows)
    if id_type == np.uint16:
        rows = [(a + 2, b) for a, b in rows]
    ids = np.array([a for a, _ in rows], id_type)
    nim = np.array([b for _, b in rows], nim_type)
    got_ids, sizes, losing = kernels.run_counts(ids, nim)
    expected = {}
    for a, b in rows:
        size, zero = expected.get(a, (0, 0))
        expected[a] = (size + 1, zero + (b == 0))
    assert got_ids.tolist() == list(expected)
    assert list(zip(sizes.tolist(), losing.tolist())) == list(expected.values())


@pytest.mark.parametrize("ids", ["one run", "runs across the cut", "a run per row at the cut",
                                 "many ids"])
def test_run_counts_and_fill_runs_split_between_threads(ids):
    """Rows enough for each thread to take a chunk of its own: runs that cross from one
    chunk into the next (one run over all rows, too) are counted once, whole; fill_runs
    writes each id its count of times from where the ids before it end. Against numpy."""
    n = 1 << 18
    rng = np.random.default_rng(7)
    values = {"one run": np.full(n, 4, np.int64),
              "runs across the cut": np.repeat(np.arange(3, dtype=np.int64), [1, n - 2, 1]),
              "a run per row at the cut": np.concatenate([
                  np.zeros(n // 2 - 1, np.int64), np.arange(1, 3, dtype=np.int64),
                  np.full(n // 2 - 1, 3, np.int64)]),
              "many ids": np.sort(rng.integers(0, 5000, n))}[ids]
    nim = rng.integers(0, 3, n).astype(np.uint8)
    unique, rows = np.unique(values, return_counts=True)
    before = kernels.get_num_threads()
    kernels.set_num_threads(3)  # three uneven chunks, whatever the machine's cores
    try:
        got_ids, sizes, losing = kernels.run_counts(values, nim)
        filled = np.full(n, -1, np.int64)
        kernels.fill_runs(filled, unique, rows.astype(np.int64))
    finally:
        kernels.set_num_threads(before)
    assert got_ids.tolist() == unique.tolist()
    assert sizes.tolist() == rows.tolist()
    assert losing.tolist() == np.bincount(np.searchsorted(unique, values[nim == 0]),
                                          minlength=unique.shape[0]).tolist()
    assert filled.tolist() == values.tolist()
    with pytest.raises(ValueError, match="negative"):  # not a write before the output
        kernels.fill_runs(filled[5:], unique[:2], np.array([-3, 2], np.int64))
    with pytest.raises(ValueError, match="overrun"):
        kernels.fill_runs(filled[:5], unique[:2], np.array([3, 3], np.int64))


def test_small_inputs_run_parallel_kernels_on_one_thread_of_the_caller_only():
    """Below PARALLEL_ROWS the caller's kernel thread count is 1 inside `threads_for`, and
    what it was after; at and above, unchanged; another thread's count never moves."""
    import threading

    from pipeline.kernels.threads import PARALLEL_ROWS

    full = kernels.get_num_threads()
    seen_elsewhere = []
    with kernels.threads_for(PARALLEL_ROWS - 1):
        assert kernels.get_num_threads() == 1
        other = threading.Thread(target=lambda: seen_elsewhere.append(kernels.get_num_threads()))
        other.start()
        other.join()
        assert kernels.nim_sums_wide(np.array([0, 2]), np.array([3, 5]), np.array([0]),
                                     np.zeros(1, np.int8), np.zeros(1, np.int64),
                                     np.zeros(1, np.int64), np.zeros(1, np.int64),
                                     np.zeros(1, np.int64), np.array([kernels.KIND_NIM])
                                     )[0].tolist() == [3 ^ 5]
    assert kernels.get_num_threads() == full
    assert seen_elsewhere == [full]
    with kernels.threads_for(PARALLEL_ROWS):
        assert kernels.get_num_threads() == full


FORK_PROBE = """
import os, sys, threading
import numpy as np
from pipeline import kernels

rows = 1 << 20
offsets = np.arange(rows + 1, dtype=np.int64)
table = (np.zeros(1, np.uint8), *(np.zeros(1, np.int64) for _ in range(4)),
         np.array([kernels.KIND_NIM]))

def total():
    return int(kernels.nim_sums_wide(offsets, offsets[1:], np.zeros(rows, np.int64),
                                     *table)[0].sum())

parent = total()  # a parallel region: the OpenMP workers exist now
pid = os.fork()
if pid == 0:
    seen = [total()]
    other = threading.Thread(target=lambda: seen.append(total()))
    other.start()
    other.join()
    os._exit(0 if seen == [parent, parent] else 1)
_, status = os.waitpid(pid, 0)
print(parent, os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_runs_parallel_kernels_after_its_parent_did():
    """A child of fork() whose parent ran parallel kernels runs them too, in the thread that
    forked and in new threads, with the same results (GNU OpenMP's workers are not
    inherited: a parallel region in the forking thread used to wait for them forever)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", FORK_PROBE], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = 1 << 20
    assert proc.stdout.split() == [str(rows * (rows + 1) // 2), "0"]

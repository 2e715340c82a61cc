"""Evaluated batches -> verdict rows in (rule_set_id, position_id) order, with every key given
more than once taken out as rejects. Pure frames and arrays; no paths.

The wide fast path keeps each batch narrow until the end (the rule set as an int32 rank among
all rule ids, integer or text, the value columns in their fewest bytes, no per-row location
column), then sorts with one counting sort and parallel scatters. Text position ids go
through polars' sort.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline import kernels, keys
from pipeline.keys import KEYS, unify_key_types
from pipeline.transforms.buffers import (
    arrow_view,
    numpy_view,
    string_views,
    text_buffers,
    text_pieces,
    text_views,
)
from pipeline.transforms.outputs import reject_rows
from pipeline.transforms.schema import REJECT_SCHEMA, shown_text

LOC_SHIFT = 40


Locate = Callable[[np.ndarray], np.ndarray]


@dataclass
class VerdictPart:
    """One batch's verdict rows: `frame` holds `_bucket` (rank of rule_set_id in the run's
    sorted rule ids) or `rule_set_id`, then position_id, nim_sum and any move
    columns. Row i came from row `rows[i]` of file `file` (`rows` None: `first_row + i`),
    or of file `files[i]` for a batch of several small files."""

    frame: pl.DataFrame
    file: int
    first_row: int
    rows: np.ndarray | None
    files: np.ndarray | None = None

    def locations(self, at: np.ndarray) -> np.ndarray:
        """`file << LOC_SHIFT | row` of the rows at these positions in `frame`."""
        row = at + self.first_row if self.rows is None else self.rows[at]
        file = np.int64(self.file) if self.files is None else self.files[at].astype(np.int64)
        return (file << LOC_SHIFT) | row


def verdict_part(evaluated: pl.DataFrame, file: int | None, rule_ids: pl.Series | None,
                 columns: Sequence[str]) -> VerdictPart:
    """Keep `columns` of a batch's evaluated rows (none rejected), narrowed for the sort:
    rule set ids found in `rule_ids` (`keys.sorted_ids`) become their int32 rank (taken from
    the `_bucket` that `evaluate.attach_tables` left, its ranks in the same sorted ids,
    when the batch carries one),
    and nim_sum and the move columns (-1 for none) take the narrowest type that holds them
    (`with_verdict` writes them as Int64, with nulls). `file` None keeps no input locations:
    for long-form positions, which have none of their own and whose keys cannot repeat. A
    batch of several files (`batches.position_batches`, `batches.coalesced`) names each
    row's file in `_file`."""
    rows = evaluated["_row"].to_numpy() if file is not None else np.zeros(0, np.int64)
    files = (evaluated["_file"].to_numpy().copy()
             if file is not None and "_file" in evaluated.columns else None)
    contiguous = files is None and (rows.shape[0] == 0 or kernels.is_identity(rows, rows[0]))
    frame = evaluated.select(columns)
    rid = frame["rule_set_id"]
    pid = frame["position_id"]
    if (rule_ids is not None and rid.dtype == rule_ids.dtype and not rid.null_count()
            and pid.dtype in (pl.Int64, pl.String) and not pid.null_count()):
        bucket = (evaluated["_bucket"].to_numpy() if "_bucket" in evaluated.columns
                  else keys.ranks(rid, rule_ids))
        if bucket.shape[0] == 0 or bucket.min() >= 0:
            frame = frame.with_columns(pl.Series("rule_set_id", bucket.astype(np.int32))
                                       ).rename({"rule_set_id": "_bucket"})
    narrow = [_narrow(frame["nim_sum"], (pl.UInt8, pl.UInt16, pl.UInt32))]
    narrow += [_narrow(frame[name].fill_null(-1), (pl.Int8, pl.Int16, pl.Int32))
               for name in MOVE_COLUMNS if name in frame.columns]
    return VerdictPart(frame.with_columns(narrow), -1 if file is None else file,
                       int(rows[0]) if rows.shape[0] else 0, None if contiguous else rows.copy(),
                       files)


def with_own_text(part: VerdictPart) -> VerdictPart:
    """`part` with its text position ids copied into buffers of their own: ids grouped from
    long-form rows are views into the text of all those rows, which they would otherwise
    keep alive until the sort (a much higher peak with long text ids)."""
    pid = part.frame["position_id"]
    if pid.dtype == pl.String:
        part.frame = part.frame.with_columns(pl.Series(pid.name, pid.to_arrow()))
    return part


MOVE_COLUMNS = ("move_heap", "move_take")


def _narrow(values: pl.Series, dtypes: Sequence[pl.DataType]) -> pl.Series:
    """Values (no nulls; -1 for a missing move) in the narrowest of `dtypes` that holds them:
    SG values are at most |S|, so a subtraction rule's nim-sums mostly need one byte where
    Int64 would hold 8 until the sort."""
    if values.len() == 0 or values.null_count():
        return values
    low, high = values.min(), values.max()
    for dtype in dtypes:
        lowest, top = _RANGES[dtype]
        if lowest <= low and high < top:
            return values.cast(dtype)
    return values


_RANGES = {pl.UInt8: (0, 2**8), pl.UInt16: (0, 2**16), pl.UInt32: (0, 2**32),
           pl.Int8: (-2**7, 2**7), pl.Int16: (-2**15, 2**15), pl.Int32: (-2**31, 2**31)}


def key_sorted_verdicts(parts: list[VerdictPart], rule_ids: pl.Series | None,
                        rejects: pl.DataFrame | Iterable[pl.DataFrame], sources: Sequence[str],
                        typed_by_rows: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """All parts' rows in key order, minus duplicate keys: (verdicts, duplicate rejects).
    nim_sum and the move columns stay narrow (see `verdict_part`). Consumes `parts`.

    `typed_by_rows`: each key's type is decided over these rows (`unify_key_types`; wide
    form), not by the type their batches had, which a rejected row alone can have made text
    (long form decides over every input row, and its parts already agree)."""
    in_input = _locator(parts)
    frames = [p.frame for p in parts]
    if (rule_ids is not None and all("_bucket" in f.columns for f in frames)
            and len({f["position_id"].dtype for f in frames}) == 1
            and (not typed_by_rows or _types_hold(frames, rule_ids))):
        parts.clear()
        ordered, came_from, repeated = (_counting_sorted(frames, rule_ids)
                                        if frames[0]["position_id"].dtype == pl.Int64
                                        else _text_sorted(frames, rule_ids))

        def locate(at: np.ndarray) -> np.ndarray:
            return in_input(at if came_from is None else came_from(at))

        return split_duplicates(ordered, rejects, sources, locate, repeated)
    for i, (p, frame) in enumerate(zip(parts, frames)):
        if "_bucket" in frame.columns:
            ids = rule_ids.gather(frame["_bucket"]).alias("rule_set_id")
            frame = frame.with_columns(ids).select("rule_set_id", pl.exclude("_bucket",
                                                                             "rule_set_id"))
        loc = p.locations(np.arange(frame.height, dtype=np.int64))
        frames[i] = frame.with_columns(pl.Series("_loc", loc))
    parts.clear()
    frames = unify_key_types(frames, "rule_set_id")
    frames = unify_key_types(frames, "position_id")
    return split_duplicates(sorted_from_parts(frames), rejects, sources)


def _types_hold(frames: list[pl.DataFrame], rule_ids: pl.Series) -> bool:
    """Whether narrow parts' keys keep their batches' types under `unify_key_types` over
    their rows: not when text keys are all integers after all (the text came from rows
    rejected since, or there are no rows), which the general path then types and sorts as
    integers. Cheap when no rule id and not the first position id reads as an integer."""
    if rule_ids.dtype == pl.String and rule_ids.str.contains(keys.CANONICAL_INT).any():
        buckets = np.concatenate([f["_bucket"].to_numpy() for f in frames])
        used = np.flatnonzero(np.bincount(buckets, minlength=rule_ids.len()))
        if not keys.needs_text(pl.DataFrame({"k": rule_ids.gather(used)}), "k"):
            return False
    pids = [f["position_id"] for f in frames if f.height]
    if not pids:
        return False
    if pids[0].dtype == pl.String and re.fullmatch(keys.CANONICAL_INT, pids[0][0]):
        return keys.needs_text(pl.DataFrame({"k": pl.concat(pids, rechunk=False)}), "k")
    return True


def _locator(parts: Sequence[VerdictPart]) -> Locate:
    """Maps row numbers of the parts' concatenation to their input locations."""
    starts = np.cumsum([0] + [p.frame.height for p in parts])
    maps = list(parts)  # only the row maps are used, after the frames are consumed

    def locate(rows: np.ndarray) -> np.ndarray:
        part = np.searchsorted(starts, rows, side="right") - 1
        out = np.empty(rows.shape[0], np.int64)
        for p in np.unique(part):
            here = part == p
            out[here] = maps[p].locations(rows[here] - starts[p])
        return out

    return locate


def _counting_sorted(frames: list[pl.DataFrame], rule_ids: pl.Series
                     ) -> tuple[pl.DataFrame, Locate | None, np.ndarray]:
    """Concatenate and sort rows by (rank, position_id) with a counting sort over the ranks,
    consuming `frames` column by column. Returns the frame (rule_set_id restored), a map
    from its row numbers to the input rows they came from (None when the input was already
    in order; used only for duplicates, so built only when asked) and which rows share
    their key with a neighbour (`_repeated_keys`, found on the ranks). Rows already in order
    (sorted exports) are only joined, by polars, whose allocator reuses the pages of the
    batches freed before, where a fresh numpy array pays a page fault for every page."""
    names = [c for c in frames[0].columns if c != "_bucket"]
    buckets = [f.drop_in_place("_bucket") for f in frames]
    pids = [f.drop_in_place("position_id") for f in frames]
    if _parts_in_order(buckets, pids):  # sorted exports: no sort, no copy through numpy
        bucket = pl.concat(buckets, rechunk=True)
        pid = pl.concat(pids, rechunk=True)
        columns = {"rule_set_id": keys.ids_at(rule_ids, bucket).set_sorted(), "position_id": pid}
        columns.update((name, _concat([f.drop_in_place(name) for f in frames]))
                       for name in names[1:])
        frames.clear()
        return (pl.DataFrame(columns), None,
                _repeated_keys(bucket.to_numpy(), pid))
    rows = sum(p.len() for p in pids)
    dest = np.empty(rows, np.int32 if rows < 2**31 else np.int64)
    with kernels.threads_for(rows):  # the parts read where they are, not joined first
        sorted_pid, counts, may_repeat = kernels.counting_sort_parts(
            [b.to_numpy() for b in buckets], rule_ids.len(), [p.to_numpy() for p in pids], dest)
    del buckets, pids
    ranks = None  # each row's rule id (integer ids) or rank, where a column or a pass needs it
    if rule_ids.dtype == pl.Int64 or may_repeat:
        ranks = np.empty(rows, np.int64)
        with kernels.threads_for(rows):
            kernels.fill_runs(ranks, rule_ids.to_numpy() if rule_ids.dtype == pl.Int64
                              else np.arange(rule_ids.len(), dtype=np.int64), counts)
    repeated = (_repeated_keys(ranks, sorted_pid) if ranks is not None and may_repeat
                else np.zeros(rows, np.bool_))
    rule_set_id = (pl.Series("rule_set_id", ranks).set_sorted() if rule_ids.dtype == pl.Int64
                   else keys.repeated_ids(rule_ids, counts))
    columns = {"rule_set_id": rule_set_id,
               "position_id": pl.Series("position_id", sorted_pid)}
    for name in names[1:]:
        column = _concat([f.drop_in_place(name) for f in frames])
        with kernels.threads_for(dest.shape[0]):
            if column.null_count() == 0 and column.dtype.is_numeric():
                columns[name] = pl.Series(name, kernels.scatter(column.to_numpy(), dest))
            else:
                columns[name] = column.gather(kernels.scatter(np.arange(dest.shape[0]), dest))
    frames.clear()

    def came_from(at: np.ndarray) -> np.ndarray:
        rows = np.flatnonzero(np.isin(dest, at))
        rows = rows[np.argsort(dest[rows])]
        return rows[np.searchsorted(dest[rows], at)]

    return pl.DataFrame(columns), came_from, repeated


def _parts_in_order(buckets: list[pl.Series], pids: list[pl.Series]) -> bool:
    """Whether the parts' rows, one after another, are sorted by (bucket, position_id)."""
    last: tuple[int, int] | None = None
    for bucket, pid in zip(buckets, pids):
        if not bucket.len():
            continue
        b, p = bucket.to_numpy(), pid.to_numpy()
        if last is not None and (int(b[0]), int(p[0])) < last:
            return False
        if not kernels.in_key_order(b, p):
            return False
        last = (int(b[-1]), int(p[-1]))
    return True


def _text_sorted(frames: list[pl.DataFrame], rule_ids: pl.Series
                 ) -> tuple[pl.DataFrame, Locate | None, np.ndarray]:
    """`_counting_sorted` for text position ids: the rows of each rule set sorted by their
    ids' bytes by a kernel (polars' own string sort took four times as long on UUIDs), which
    reads the texts where polars holds them (`kernels.text_addresses`); the repeated keys are
    found on the sorted column's string views (`kernels.sorted_view_repeats`). Copying every
    text into one buffer first and comparing the sorted column's neighbours through polars
    ran on one core, between the parallel sort and the parallel write."""
    names = [c for c in frames[0].columns if c != "_bucket"]
    bucket = _concat([f.drop_in_place("_bucket") for f in frames]).to_numpy()
    pid = pl.concat([f.drop_in_place("position_id") for f in frames], rechunk=True)  # its
    # views joined, not the texts: a gather from many chunks took seven times as long
    ptrs, lens, kept = kernels.text_addresses(text_pieces(pid), pid.len())
    with kernels.threads_for(bucket.shape[0]):
        order, counts = kernels.text_key_order_at(bucket, rule_ids.len(), ptrs, lens)
    del bucket, ptrs, lens, kept
    in_order = kernels.is_identity(order)
    take = _gather_index(order)
    columns = {"rule_set_id": keys.repeated_ids(rule_ids, counts),
               "position_id": pid if in_order else pid.gather(take)}
    with kernels.threads_for(order.shape[0]):
        repeated = kernels.sorted_view_repeats(counts, *string_views(columns["position_id"]))
    for name in names[1:]:
        column = _concat([f.drop_in_place(name) for f in frames])
        columns[name] = column if in_order else column.gather(take)
    frames.clear()
    if in_order:
        return pl.DataFrame(columns), None, repeated

    def came_from(at: np.ndarray) -> np.ndarray:
        return order[at]

    return pl.DataFrame(columns), came_from, repeated


def _gather_index(order: np.ndarray) -> pl.Series | np.ndarray:
    """A sort's order as polars' own index type (UInt32), which its gathers take without
    converting it for each column."""
    return pl.Series(order.astype(np.uint32)) if order.shape[0] < 2**32 else order


def _repeated_keys(ranks: np.ndarray, pid: pl.Series | np.ndarray) -> np.ndarray:
    """Which rows of key-sorted verdicts have the key of the row before or after them, from
    each row's rule set rank (or integer id) and integer position id: integers compared, not
    the text of rule ids (text position ids: `kernels.sorted_view_repeats`)."""
    return kernels.adjacent_duplicates(ranks, np.asarray(pid))


def _concat(pieces: list[pl.Series]) -> pl.Series:
    """One contiguous column; pieces narrowed to different widths meet at Int64."""
    if len({p.dtype for p in pieces}) > 1:
        pieces = [p.cast(pl.Int64) for p in pieces]
    return pl.concat(pieces, rechunk=True)


def verdict_rows(evaluated: pl.DataFrame, winning_moves: bool) -> pl.DataFrame:
    """Evaluated rows (keys, nim_sum, moves), sorted by (rule_set_id, position_id) for
    reproducible output; `with_verdict` adds the W/L column when written."""
    cols = ["rule_set_id", "position_id", "nim_sum"]
    if winning_moves:
        cols += ["move_heap", "move_take"]
    return sort_by_keys(evaluated.filter(pl.col("_reason").is_null()).select(cols))


def sort_by_keys(frame: pl.DataFrame) -> pl.DataFrame:
    """Sort by (rule_set_id, position_id)."""
    return sorted_from_parts([frame.clone()])


def sorted_from_parts(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate and sort by (rule_set_id, position_id), consuming `parts` column by column
    so the peak is the data plus one column."""
    names = parts[0].columns
    columns = {name: _concat([p.drop_in_place(name) for p in parts]) for name in names}
    parts.clear()
    order = pl.DataFrame([columns["rule_set_id"], columns["position_id"]]).select(
        pl.arg_sort_by(KEYS)).to_series()
    if order.len() and order.diff().drop_nulls().eq(1).all():  # already in key order
        return pl.DataFrame(columns)
    return pl.DataFrame({name: col.gather(order) for name, col in columns.items()})


KEYS_ONLY = pl.DataFrame(schema={"rule_set_id": pl.String, "position_id": pl.String})
"""Rejected rows' keys as text, none: what `split_duplicates` needs of the rejects."""


def split_duplicates(ordered: pl.DataFrame, rejects: pl.DataFrame | Iterable[pl.DataFrame],
                     sources: Sequence[str], locate: Locate | None = None,
                     repeated: np.ndarray | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Take every position whose key is given more than once (also when another copy was
    rejected for its own reason) out of key-sorted verdicts: (verdicts, their rejects).
    `rejects`: the rejected rows (their keys, as text), or chunks of their keys, of which
    only those naming a key of `ordered` are kept, a chunk at a time (a night of millions
    of rejected keys, spilled, held all of them before, and joined them twice).

    The reject rows need each copy's location (file index << LOC_SHIFT | row): `locate` maps
    row numbers of `ordered` to it, or else `ordered` carries it as `_loc`. The result has no
    `_loc`. `repeated`: the rows whose key a neighbour has, when the sort found them already.
    """
    if repeated is not None:  # none repeated (the common case): no copy of the flags
        dup = (pl.Series(repeated) if repeated.any()
               else pl.zeros(ordered.height, pl.Boolean, eager=True))
    elif all(ordered[k].dtype == pl.Int64 and not ordered[k].null_count() for k in KEYS):
        dup = pl.Series(kernels.adjacent_duplicates(*(ordered[k].to_numpy() for k in KEYS)))
    else:
        same = [(pl.col(k) == pl.col(k).shift(d)) for d in (1, -1) for k in KEYS]
        dup = ordered.select(((same[0] & same[1]) | (same[2] & same[3])).fill_null(False)
                             ).to_series()
    def as_keys(rows: pl.DataFrame) -> pl.DataFrame:
        return (rows.filter(pl.col("rule_set_id").is_not_null()
                            & pl.col("position_id").is_not_null())
                .select(keys.rejected_key_as(k, ordered[k].dtype) for k in KEYS).drop_nulls())

    if isinstance(rejects, pl.DataFrame):
        rejected = as_keys(rejects)
    else:
        verdict_keys = ordered.select(KEYS)
        rejected = pl.concat([as_keys(KEYS_ONLY), *(
            as_keys(chunk).join(verdict_keys, on=KEYS, how="semi") for chunk in rejects)])
    if rejected.height:
        dup = dup | ordered.select(KEYS).join(
            rejected.unique().with_columns(pl.lit(True).alias("_rej")), on=KEYS, how="left",
            maintain_order="left")["_rej"].fill_null(False)
    without_loc = [c for c in ordered.columns if c != "_loc"]
    if not dup.any():
        return ordered.select(without_loc), pl.DataFrame(schema=REJECT_SCHEMA)
    dups = ordered.filter(dup)
    if locate is not None:
        dups = dups.with_columns(pl.Series("_loc", locate(np.flatnonzero(dup.to_numpy()))))
    clean = ordered.filter(~dup).select(without_loc)
    times = pl.concat([dups.select(KEYS), rejected]).group_by(KEYS).len("_n")
    dups = dups.join(times, on=KEYS, how="left").with_columns(
        (pl.col("_loc") // 2**LOC_SHIFT).replace_strict(
            list(range(len(sources))), list(sources), return_dtype=pl.String).alias("_source"),
        (pl.col("_loc") % 2**LOC_SHIFT).alias("_row"),
        pl.lit("position_id").alias("_column"),
        pl.format("position_id {} appears {} times for rule_set_id {}",
                  shown_text(pl.col("position_id")), pl.col("_n"),
                  shown_text(pl.col("rule_set_id"))).alias("_reason"),
    )
    return clean, reject_rows(dups, "positions")


# Sorted runs: the wide path's verdicts held past the memory setting are sorted into runs that
# the engine spills to scratch, then merged (`merge_round`) into key order a slice at a time.

def spillable(parts: Sequence[VerdictPart], pid_type: pl.DataType | None) -> bool:
    """Whether these parts can go into a sorted run: narrow (`_bucket`, see `verdict_part`),
    with position ids of one type (`pid_type`, the runs' so far, when given) that the kernels
    sort (Int64 without nulls, or text)."""
    types = {p.frame["position_id"].dtype for p in parts}
    return (all("_bucket" in p.frame.columns for p in parts) and len(types) == 1
            and next(iter(types)) in (pl.Int64, pl.String)
            and (pid_type is None or types == {pid_type}))


@dataclass
class RunKeys:
    """What the sorted runs' rows say about their keys' types, gathered as each run is made,
    for the check `_types_hold` makes over all rows at once: the rule sets used, and whether
    some position id is text that reads as no integer."""

    used: np.ndarray
    pid_text: bool = False
    rows: int = 0

    @classmethod
    def over(cls, rule_ids: pl.Series) -> RunKeys:
        return cls(np.zeros(rule_ids.len(), bool))

    def add(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        self.rows += frame.height
        self.used |= np.bincount(frame["_bucket"].to_numpy(), minlength=self.used.size) > 0
        pid = frame["position_id"]
        if pid.dtype == pl.String and not self.pid_text:
            self.pid_text = (not re.fullmatch(keys.CANONICAL_INT, pid[0])
                             or keys.needs_text(frame.select("position_id"), "position_id"))

    def hold(self, rule_ids: pl.Series, pid_type: pl.DataType) -> bool:
        """`_types_hold` over every row of the runs."""
        if not self.rows:
            return False
        if rule_ids.dtype == pl.String and rule_ids.str.contains(keys.CANONICAL_INT).any():
            ids = rule_ids.gather(np.flatnonzero(self.used))
            if not keys.needs_text(pl.DataFrame({"k": ids}), "k"):
                return False
        return pid_type != pl.String or self.pid_text


def sorted_run(parts: list[VerdictPart], n_buckets: int, rows: int,
               loc_shift: int | None = None) -> Iterator[pa.Table]:
    """The parts' rows sorted by (`_bucket`, position_id), each with its input location as
    `_loc` (`VerdictPart.locations`), as Arrow tables of `rows` rows: a run to spill,
    gathered a slice at a time from the parts' columns joined once (no sorted copy of them
    all). `loc_shift`: `_loc` as uint32 `file << loc_shift | row` instead (the caller
    knows that they fit), half the bytes to hold and to gather at random. Consumes
    `parts`."""
    frames = []
    for p in parts:
        loc = p.locations(np.arange(p.frame.height, dtype=np.int64))
        if loc_shift is not None:
            loc = ((loc >> LOC_SHIFT) << loc_shift | (loc & ((1 << LOC_SHIFT) - 1))
                   ).astype(np.uint32)
        frames.append(p.frame.with_columns(pl.Series("_loc", loc)))
        p.frame = p.frame.clear()
    parts.clear()
    return _sorted_slices(frames, n_buckets, rows)


def _sorted_slices(frames: list[pl.DataFrame], n_buckets: int, rows: int
                   ) -> Iterator[pa.Table]:
    """Narrow frames' rows (`_bucket`, position_id, others without nulls) sorted by
    (`_bucket`, position_id) (integer ids: the counting sort `_counting_sorted` uses; text:
    `kernels.text_run_order`, which leaves the texts themselves in key order), as Arrow
    tables of `rows` rows. Consumes `frames` as it starts."""
    names = [c for c in frames[0].columns if c not in ("_bucket", "position_id")]
    bucket = _concat([f.drop_in_place("_bucket") for f in frames]).to_numpy()
    pids = [f.drop_in_place("position_id") for f in frames]
    others = {name: _concat([f.drop_in_place(name) for f in frames]).to_numpy()
              for name in names}
    frames.clear()
    n = bucket.shape[0]
    if pids[0].dtype == pl.Int64:
        dest = np.empty(n, np.int32 if n < 2**31 else np.int64)
        ends = np.cumsum([p.len() for p in pids])[:-1]  # the joined buckets cut as the ids
        with kernels.threads_for(n):  # the ids read where they are, not joined first
            sorted_pid, counts, _ = kernels.counting_sort_parts(
                np.split(bucket, ends), n_buckets, [p.to_numpy() for p in pids], dest)
        del pids, bucket
        with kernels.threads_for(n):
            order = kernels.scatter(np.arange(n, dtype=dest.dtype), dest)
        del dest

        def position_ids(at: slice, _: pa.Array) -> pa.Array:
            return arrow_view(sorted_pid[at])
    else:  # the texts moved into key order by the sort itself: slices of them, no gather
        def pieces() -> Iterator[tuple]:
            pids.reverse()
            while pids:
                pid = pids.pop()
                yield text_views(pid) or text_buffers(pid)

        with kernels.threads_for(n):
            offsets, data, order, counts = kernels.text_run_order(
                bucket, n_buckets, np.concatenate([p.str.len_bytes().to_numpy() for p in pids]
                                                  or [np.zeros(0, np.uint32)]), pieces())
        del bucket
        text = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))

        def position_ids(at: slice, take: pa.Array) -> pa.Array:
            return text.slice(at.start, at.stop - at.start)
    return _slices(n, rows, order, np.cumsum(counts), position_ids, others)


def _slices(n: int, rows: int, order: np.ndarray, ends: np.ndarray,
            position_ids: Callable[[slice, pa.Array], pa.Array],
            others: dict[str, np.ndarray]) -> Iterator[pa.Table]:
    for start in range(0, max(n, 1), rows):
        at = slice(start, min(start + rows, n))
        take = order[at]
        columns = {"_bucket": arrow_view(bucket_rows(ends, at.start, at.stop)),
                   "position_id": position_ids(at, arrow_view(take))}
        columns.update((name, arrow_view(values[take])) for name, values in others.items())
        yield pa.table(columns)


def bucket_rows(ends: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The buckets (int32) of rows start..stop of rows sorted by bucket, bucket b ending
    before row ends[b] (the cumulative rows per bucket): a slice's own, without the whole
    run's column."""
    if stop <= start:
        return np.zeros(0, np.int32)
    first = int(np.searchsorted(ends, start, "right"))
    last = int(np.searchsorted(ends, stop - 1, "right"))
    begins = np.concatenate([[start], ends[first:last]])
    here = np.minimum(ends[first:last + 1], stop) - np.maximum(begins, start)
    return np.repeat(np.arange(first, last + 1, dtype=np.int32), here)


def _numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column without nulls as numpy: a view of its one chunk (or of an array), a copy
    joining several."""
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return numpy_view(column)


def key_at(run: pa.Table, row: int) -> tuple[int, int | str]:
    """The (`_bucket`, position_id) of a row of a sorted run."""
    return int(run["_bucket"][row].as_py()), run["position_id"][row].as_py()


def rows_below(run: pa.Table, key: tuple[int, int | str], through: bool = False) -> int:
    """How many rows of a sorted run come before `key` (`key_at`; `through`: at or before
    it): binary searches in the chunk where the key falls, in the rule set's bucket and then
    in its position ids (text compared as Python compares str, by code point: UTF-8's byte
    order, which the sort follows)."""
    below = 0
    for bucket, pid in _segments(run):
        n = len(bucket)
        last = (bucket[n - 1].as_py(), pid[n - 1].as_py()) if n else None
        if last is not None and (last <= key if through else last < key):
            below += n  # the key is past this chunk
            continue
        return below + _rows_below(bucket, pid, key, through)
    return below


def _segments(run: pa.Table) -> list[tuple[pa.Array, pa.Array]]:
    """A run's (`_bucket`, position_id) chunk by chunk (record batches as read), joined
    when the two columns are not chunked alike."""
    buckets, pids = run["_bucket"], run["position_id"]
    if [len(c) for c in buckets.chunks] != [len(c) for c in pids.chunks]:
        return [(buckets.combine_chunks(), pids.combine_chunks())]
    return list(zip(buckets.chunks, pids.chunks))


def _rows_below(bucket: pa.Array, pid: pa.Array, key: tuple[int, int | str],
                through: bool) -> int:
    """`rows_below` within one chunk."""
    buckets = numpy_view(bucket)
    lo = int(np.searchsorted(buckets, key[0], "left"))
    hi = int(np.searchsorted(buckets, key[0], "right"))
    if lo == hi:
        return lo
    if pa.types.is_integer(pid.type):
        return lo + int(np.searchsorted(numpy_view(pid)[lo:hi], key[1],
                                        "right" if through else "left"))
    while lo < hi:
        mid = (lo + hi) // 2
        value = pid[mid].as_py()
        if value <= key[1] if through else value < key[1]:
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass
class MergedSlice:
    """Rows taken from sorted runs, merged (`merged_slice`): the verdicts as the output
    table's Arrow columns (`evaluate.with_verdict`'s), their W and L per rule set rank, and
    the duplicate rejects."""

    verdicts: pa.Table
    wins: np.ndarray
    losses: np.ndarray
    duplicates: pl.DataFrame


VERDICT_TEXT = pa.LargeStringArray.from_buffers(  # not pa.array: it imports pandas (0.15 s)
    2, pa.py_buffer(np.array([0, 1, 2], np.int64)), pa.py_buffer(b"LW"))
"""The verdict column's dictionary in a merged slice: its codes are the verdict (a Parquet
writer encodes them without hashing each row's text; `scratch.Spill.parquet` declares the
column text)."""


class SliceBuffers:
    """The arrays a merge fills slice after slice (`merged_slice`), kept from one slice to
    the next: an array as large as a slice, freed and allocated again, is fresh pages each
    time, which the kernel zeroes on first touch (a third of a 100M merge's CPU was that).
    `sets` sets, used in turn (`turn`): the slices before are still being encoded from
    theirs while the next is merged into another (`scratch.Spill.parquet` with `sets - 1`
    encoders returns once fewer than that many slices are being encoded, so the set of the
    slice `sets - 1` before is free again)."""

    def __init__(self, sets: int = 2) -> None:
        self._sets: list[dict[str, np.ndarray]] = [{} for _ in range(sets)]
        self._at = 0
        self._counting = np.zeros(0, np.int64)

    def turn(self) -> None:
        self._at = (self._at + 1) % len(self._sets)

    def empty(self, name: str, n: int, dtype: np.dtype) -> np.ndarray:
        """n values of this set's array `name` (contents undefined)."""
        held = self._sets[self._at].get(name)
        if held is None or held.shape[0] < n or held.dtype != dtype:
            held = self._sets[self._at][name] = np.empty(n + n // 4, dtype)
        return held[:n]

    def counting(self, n: int) -> np.ndarray:
        """0, 1, ..., n as int64 (read only, shared by both sets)."""
        if self._counting.shape[0] < n + 1:
            self._counting = np.arange(n + n // 4 + 1, dtype=np.int64)
        return self._counting[:n + 1]


def merged_slice(takes: list[pa.Table], rule_ids: pl.Series, rejects: pl.DataFrame,
                 sources: Sequence[str], reuse: SliceBuffers | None = None) -> MergedSlice:
    """Rows taken from sorted runs (every row of each key among them, see `merge_round`)
    in key order, rule_set_id restored, minus duplicate keys, as `key_sorted_verdicts` gives
    for all rows at once. The takes, each in key order, are merged by a kernel
    (`kernels.merge_text_runs`, `merge_int_runs`) that copies the position ids once, in
    order, and counts repeated keys as it goes; the other columns are gathered by the merged
    order. In Arrow: the slice goes through polars (`split_duplicates`) only when it holds a
    repeated key or a rejected row names a key. `reuse`: arrays kept from slice to slice
    (its next set is taken here; the verdicts' columns are views of it until the slice after
    next)."""
    runs = [t for t in takes if t.num_rows]
    names = takes[0].column_names
    n_buckets = rule_ids.len()
    if reuse is None:
        reuse = SliceBuffers()
    reuse.turn()
    if pa.types.is_integer(takes[0].schema.field("position_id").type):
        bucket, key, order, repeats = kernels.merge_int_runs([
            [(numpy_view(b), numpy_view(p))
             for b, p in _segments(t)] for t in runs], reuse.empty)
        position_id = arrow_view(key)
    else:
        bucket, offsets, data, order, repeats = kernels.merge_text_runs([
            [(numpy_view(b), *_text_buffers(p))
             for b, p in _segments(t)] for t in runs], reuse.empty)
        position_id = pa.LargeStringArray.from_buffers(
            bucket.shape[0], pa.py_buffer(offsets), pa.py_buffer(data))
    n = bucket.shape[0]

    def gathered(name: str) -> np.ndarray:
        """A column's values in the merged order (its chunks one after another, as the
        kernel numbers the rows)."""
        if not runs:
            return _numpy(takes[0][name])
        chunks = [numpy_view(c) for t in runs for c in t[name].chunks]
        joined = reuse.empty("joined_" + name, n, np.result_type(*chunks))
        np.concatenate(chunks, out=joined)
        return np.take(joined, order, out=reuse.empty("gathered_" + name, n, joined.dtype))

    ids = rule_ids.to_arrow()
    if repeats or rejects.filter(pl.col("rule_set_id").is_not_null()
                                 & pl.col("position_id").is_not_null()).height:
        # copies: polars keeps views of the arrays it is given, and the duplicates outlive
        # `reuse`'s arrays (rare: keys repeated, or rejects that name keys)
        columns = {"_bucket": arrow_view(bucket.copy()), "position_id": _copied(position_id)}
        columns.update((name, arrow_view(gathered(name).copy())) for name in names
                       if name not in columns)
        frame = pl.from_arrow(pa.table(columns))
        frame = frame.select(pl.Series("rule_set_id", rule_ids.gather(frame["_bucket"])),
                             pl.exclude("rule_set_id"))
        clean, duplicates = split_duplicates(frame, rejects, sources)
        ordered = clean.to_arrow()
        bucket = _numpy(ordered["_bucket"])
        nim = _numpy(ordered["nim_sum"])
        position_id = ordered["position_id"]
        moves = {name: ordered[name] for name in names if name in MOVE_COLUMNS}
        n = ordered.num_rows
    else:
        duplicates = pl.DataFrame(schema=REJECT_SCHEMA)
        nim = gathered("nim_sum")
        moves = {name: arrow_view(gathered(name)) for name in names if name in MOVE_COLUMNS}
    won = np.not_equal(nim, 0, out=reuse.empty("won", n, np.bool_))
    # the rows are in bucket order: each bucket's rows are a range (np.bincount would cast
    # the whole slice to intp and float64 first)
    bounds = np.searchsorted(bucket, np.arange(n_buckets + 1, dtype=bucket.dtype))
    total = np.diff(bounds)
    wins = np.zeros(n_buckets, np.int64)
    used = np.flatnonzero(total)
    if used.shape[0]:
        wins[used] = np.add.reduceat(won, bounds[used], dtype=np.int64)
    nim_sum = reuse.empty("nim_sum", n, np.int64)
    nim_sum[:] = nim
    verdict = arrow_view(won.view(np.uint8))  # codes of VERDICT_TEXT: 0 L, 1 W
    columns = {"rule_set_id": _rule_set_ids(ids, bucket, reuse),
               "position_id": position_id,
               "nim_sum": arrow_view(nim_sum),
               "verdict": pa.DictionaryArray.from_arrays(verdict, VERDICT_TEXT)}
    for name, values in moves.items():  # the move columns, -1 for none (`with_verdict`: null)
        columns[name] = _null_below_zero(_numpy(values))
    return MergedSlice(pa.table(columns), wins, total - wins, duplicates)


def _null_below_zero(values: np.ndarray) -> pa.Array:
    """Int64 values, null where negative (from buffers: pyarrow.compute's scalars import
    pandas)."""
    valid = values >= 0
    return pa.Array.from_buffers(
        pa.int64(), values.shape[0],
        [pa.py_buffer(np.packbits(valid, bitorder="little")),
         pa.py_buffer(values.astype(np.int64))], null_count=int(values.shape[0] - valid.sum()))


def _rule_set_ids(ids: pa.Array, bucket: np.ndarray, reuse: SliceBuffers) -> pa.Array:
    """A merged slice's rule_set_id column from its rows' buckets (ranks in `ids`, in
    order): text ids as codes of the ids the slice spans (a Parquet writer encodes them
    without hashing each row's text, and the slice's text is not gathered); integers as
    themselves."""
    if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)) \
            or not bucket.shape[0]:
        return ids.take(arrow_view(bucket))
    low, high = int(bucket[0]), int(bucket[-1]) + 1
    codes = reuse.empty("rule_codes", bucket.shape[0], np.int32)
    np.subtract(bucket, low, out=codes, casting="unsafe")
    return pa.DictionaryArray.from_arrays(arrow_view(codes), ids.slice(low, high - low))


def _copied(column: pa.Array) -> pa.Array:
    """A merged position id column in buffers of its own."""
    if pa.types.is_integer(column.type):
        return arrow_view(_numpy(column).copy())
    offsets, data = _text_buffers(column)
    return pa.LargeStringArray.from_buffers(len(column), pa.py_buffer(offsets.copy()),
                                            pa.py_buffer(data.copy()))


def _text_buffers(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A text array's (Arrow offsets of its rows, into its bytes; the bytes), as views."""
    if not len(column):
        return np.zeros(1, np.int64), np.zeros(0, np.uint8)
    if not pa.types.is_large_string(column.type):
        column = column.cast(pa.large_string())
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset:
                                                           column.offset + len(column) + 1]
    data = column.buffers()[2]
    return offsets, (np.frombuffer(data, np.uint8) if data is not None
                     else np.zeros(0, np.uint8))


def merge_round(buffers: list[pa.Table], live: list[bool]
                ) -> tuple[list[pa.Table], list[pa.Table], set[int]]:
    """One step of a k-way merge of sorted runs, of which `buffers` hold the next rows read
    (none empty while its run is live) and `live[i]` says whether run i has rows not read
    yet: every buffered row before the smallest last key of a live run's buffer is safe to
    emit, as no row still unread comes before it, and with it all copies of its key (a key's
    rows in later reads are not before that key). Returns (the rows to emit, per run; the
    rows kept; the runs whose buffers end at that key, which must read more before the next
    step). With no live run, everything is emitted."""
    lasts = {i: key_at(b, b.num_rows - 1) for i, b in enumerate(buffers) if live[i]}
    if not lasts:
        return buffers, [b.slice(0, 0) for b in buffers], set()
    cutoff = min(lasts.values())
    below = [rows_below(b, cutoff) for b in buffers]
    return ([b.slice(0, n) for b, n in zip(buffers, below)],
            [b.slice(n) for b, n in zip(buffers, below)],
            {i for i, k in lasts.items() if k == cutoff})

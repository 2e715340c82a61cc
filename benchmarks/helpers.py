"""Helpers that bench.py runs as subprocesses (the driver stays small; benchmarks/README.md).

    helpers.py moves OUT --rules R --moves K --max-move M --values N --seed S
        the SG benchmark's input: "R N", then R lines "k s1..sk" (K distinct moves from 1..M)
    helpers.py classic OUT --target-bytes B --seed S
        a classic S-Nim text input of about B bytes (many test cases; up to 100 moves <= 10^4,
        heaps <= 10^4, 1..10 heaps per position), ending with 0
    helpers.py rows DIR
        print the number of position rows of a generated dataset (Parquet metadata only)
    helpers.py same-nim-sums VERDICTS PLAN FLOOR N
        check that the polars plan's nim_sum equals snim-batch's for every position, and that
        both (and the I/O floor) have N rows
    helpers.py same-verdicts A B [FLOOR]
        check that verdicts B hold, per rule set (rs00042 is 42), as many positions of each
        nim-sum as A (the shapes of one seed hold the same positions under other keys), and
        that the floor wrote as many rows as B
    helpers.py same-bytes A B
        check that two files are byte for byte identical
    helpers.py rows-of FILE
        print the number of rows of a Parquet file (metadata only)
    helpers.py hex-positions DIR --positions N --files F --seed S
        issue 37's shape: DIR/rules.parquet (1,000 rule sets rs00000.. of 1..100 moves <= 10^4)
        and F Parquet files of N positions in all, 1..9 heaps <= 10^4 each, 32-character hex
        position ids (random, so in random order)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np


def write_moves(out: Path, rules: int, moves: int, max_move: int, values: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = [f"{rules} {values}"]
    for _ in range(rules):
        s = np.sort(rng.choice(max_move, size=moves, replace=False) + 1)
        lines.append(f"{moves} " + " ".join(map(str, s.tolist())))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out)


def write_classic(out: Path, target_bytes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tmp = out.with_name(out.name + ".tmp")
    size = cases = positions = 0
    with open(tmp, "w") as f:
        while size < target_bytes:
            k = int(rng.integers(1, 101))
            s = rng.choice(10_000, size=k, replace=False) + 1
            m = int(rng.integers(1, 2001))
            ls = rng.integers(1, 11, size=m)
            heaps = rng.integers(0, 10_001, size=int(ls.sum())).tolist()
            parts = [f"{k} " + " ".join(map(str, s.tolist())), str(m)]
            at = 0
            for ln in ls.tolist():
                parts.append(f"{ln} " + " ".join(map(str, heaps[at:at + ln])))
                at += ln
            text = "\n".join(parts) + "\n"
            f.write(text)
            size += len(text)
            cases += 1
            positions += m
        f.write("0\n")
    tmp.replace(out)
    print(f"wrote {out}: {size + 2} bytes, {cases} test cases, {positions} positions")


def rows(directory: Path) -> None:
    import polars as pl

    parquet = sorted((directory / "positions").glob("*.parquet"))
    scan = (pl.scan_parquet(parquet) if parquet
            else pl.scan_csv(sorted((directory / "positions").glob("*.csv"))))
    print(scan.select(pl.len()).collect().item())


def narrow(source: Path, target: Path) -> None:
    """A copy of a wide Parquet dataset with narrow and unsigned integers: Int16 rule ids,
    UInt32 position ids, List(UInt16) heaps (the shapes a first run compiles most for)."""
    import polars as pl

    tmp = target.with_name(target.name + ".tmp")
    (tmp / "positions").mkdir(parents=True)
    rules = pl.read_parquet(source / "rules.parquet")
    rules.with_columns(pl.col("rule_set_id").cast(pl.Int16)).write_parquet(tmp / "rules.parquet")
    for part in sorted((source / "positions").glob("*.parquet")):
        pl.read_parquet(part).with_columns(
            pl.col("rule_set_id").cast(pl.Int16), pl.col("position_id").cast(pl.UInt32),
            pl.col("heaps").cast(pl.List(pl.UInt16))).write_parquet(tmp / "positions" / part.name)
    tmp.rename(target)
    print(f"wrote {target}")


def same_nim_sums(verdicts: Path, plan: Path, floor: Path, n: int) -> None:
    import polars as pl

    ours = pl.scan_parquet(verdicts).select("rule_set_id", "position_id", "nim_sum")
    theirs = pl.scan_parquet(plan).select("rule_set_id", "position_id",
                                          pl.col("nim_sum").alias("plan"))
    counts = {
        "snim-batch": ours.select(pl.len()).collect().item(),
        "polars plan": theirs.select(pl.len()).collect().item(),
        "I/O floor": pl.scan_parquet(floor).select(pl.len()).collect().item(),
    }
    for name, c in counts.items():
        if c != n:
            sys.exit(f"{name} wrote {c} rows, expected {n}")
    diff = (ours.join(theirs, on=["rule_set_id", "position_id"], how="full")
            .filter(pl.col("nim_sum").is_null() | pl.col("plan").is_null()
                    | (pl.col("nim_sum") != pl.col("plan")))
            .select(pl.len()).collect().item())
    if diff:
        sys.exit(f"snim-batch and the polars plan disagree on {diff} positions")
    print(f"nim sums identical on all {n} positions")


def same_verdicts(a: Path, b: Path, floor: Path | None) -> None:
    import polars as pl
    from polars.testing import assert_frame_equal

    def profile(path: Path) -> pl.DataFrame:
        rule = pl.col("rule_set_id").cast(pl.String).str.strip_prefix("rs").cast(pl.Int64)
        return (pl.scan_parquet(path).group_by(rule.alias("rule"), "nim_sum").len()
                .sort("rule", "nim_sum").collect())

    x, y = profile(a), profile(b)
    try:
        assert_frame_equal(x, y)
    except AssertionError as exc:
        sys.exit(f"{b} and {a} differ in nim-sums per rule set: {str(exc).splitlines()[0]}")
    n = int(y["len"].sum())
    said = f"same nim-sums per rule set as `{a.parent.name}` ({n:,} verdicts)"
    if floor is not None:
        rows = pl.scan_parquet(floor).select(pl.len()).collect().item()
        if rows != n:
            sys.exit(f"the floor wrote {rows} rows, {b} {n}")
        said += "; the floor wrote as many rows"
    print(said)


def _s3(url: str):
    """A pyarrow S3 file system from the AWS_* environment, and `url` as bucket/key."""
    import os

    from pyarrow import fs

    store = fs.S3FileSystem(endpoint_override=os.environ.get("AWS_ENDPOINT_URL"),
                            region=os.environ.get("AWS_REGION"), allow_bucket_creation=True)
    return store, url.removeprefix("s3://").rstrip("/")


def upload(directory: Path, url: str) -> None:
    """Every file below `directory` to the same relative key below `url` (bucket created)."""
    store, prefix = _s3(url)
    store.create_dir(prefix.split("/", 1)[0])
    files = [p for p in sorted(directory.rglob("*")) if p.is_file()]
    for path in files:
        with path.open("rb") as src, store.open_output_stream(
                f"{prefix}/{path.relative_to(directory).as_posix()}") as out:
            shutil.copyfileobj(src, out, 1 << 23)
    print(f"uploaded {len(files)} files")


def fetch_verdicts(url: str, target: Path) -> None:
    """The verdicts.parquet a committed object-store output's manifest lists, to `target`."""
    store, prefix = _s3(url)
    with store.open_input_stream(f"{prefix}/manifest.json") as fh:
        manifest = json.loads(fh.read())
    entry = next(e for e in manifest["outputs"] if e["name"] == "verdicts.parquet")
    with store.open_input_stream(f"{prefix}/{entry['path']}") as src, target.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 23)


def same_bytes(a: Path, b: Path) -> None:
    x, y = a.read_bytes(), b.read_bytes()
    if x != y:
        at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        sys.exit(f"{a} and {b} differ (sizes {len(x)} and {len(y)}; first difference at "
                 f"byte {at})")
    print(f"identical ({len(x)} bytes)")


def hex_positions(directory: Path, positions: int, files: int, seed: int) -> None:
    import polars as pl
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    (directory / "positions").mkdir(parents=True, exist_ok=True)
    ids = np.array([f"rs{i:05d}" for i in range(1000)])
    moves = [np.sort(rng.choice(10_000, int(rng.integers(1, 101)), replace=False) + 1).tolist()
             for _ in range(1000)]
    pl.DataFrame({"rule_set_id": ids, "kind": ["subtraction"] * 1000, "moves": moves}
                 ).write_parquet(directory / "rules.parquet")
    for f in range(files):
        n = positions // files + (f < positions % files)
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(rng.integers(1, 10, n), out=offsets[1:])
        heaps = pa.ListArray.from_arrays(pa.array(offsets),
                                         pa.array(rng.integers(0, 10_001, int(offsets[-1]))))
        raw = np.frombuffer(rng.bytes(16 * n), dtype="S16")
        frame = pl.DataFrame({
            "rule_set_id": ids[rng.integers(0, 1000, n)],
            "position_id": pl.Series(raw, dtype=pl.Binary).bin.encode("hex"),
            "heaps": pl.Series(heaps)})
        tmp = directory / "positions" / f".part-{f:05d}.parquet"
        frame.write_parquet(tmp, row_group_size=1 << 20)
        tmp.rename(directory / "positions" / f"part-{f:05d}.parquet")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("moves")
    p.add_argument("out", type=Path)
    p.add_argument("--rules", type=int, required=True)
    p.add_argument("--moves", type=int, required=True)
    p.add_argument("--max-move", type=int, required=True)
    p.add_argument("--values", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p = sub.add_parser("classic")
    p.add_argument("out", type=Path)
    p.add_argument("--target-bytes", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p = sub.add_parser("rows")
    p.add_argument("dir", type=Path)
    p = sub.add_parser("narrow")
    p.add_argument("source", type=Path)
    p.add_argument("target", type=Path)
    p = sub.add_parser("same-nim-sums")
    p.add_argument("verdicts", type=Path)
    p.add_argument("plan", type=Path)
    p.add_argument("floor", type=Path)
    p.add_argument("n", type=int)
    p = sub.add_parser("same-verdicts")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("floor", type=Path, nargs="?")
    p = sub.add_parser("upload")
    p.add_argument("dir", type=Path)
    p.add_argument("url")
    p = sub.add_parser("fetch-verdicts")
    p.add_argument("url")
    p.add_argument("target", type=Path)
    p = sub.add_parser("same-bytes")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p = sub.add_parser("rows-of")
    p.add_argument("file", type=Path)
    p = sub.add_parser("hex-positions")
    p.add_argument("dir", type=Path)
    p.add_argument("--positions", type=int, required=True)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--seed", type=int, default=37)
    a = ap.parse_args()
    if a.cmd == "moves":
        write_moves(a.out, a.rules, a.moves, a.max_move, a.values, a.seed)
    elif a.cmd == "classic":
        write_classic(a.out, a.target_bytes, a.seed)
    elif a.cmd == "rows":
        rows(a.dir)
    elif a.cmd == "narrow":
        narrow(a.source, a.target)
    elif a.cmd == "same-nim-sums":
        same_nim_sums(a.verdicts, a.plan, a.floor, a.n)
    elif a.cmd == "same-verdicts":
        same_verdicts(a.a, a.b, a.floor)
    elif a.cmd == "upload":
        upload(a.dir, a.url)
    elif a.cmd == "fetch-verdicts":
        fetch_verdicts(a.url, a.target)
    elif a.cmd == "rows-of":
        import pyarrow.parquet as pq

        print(pq.ParquetFile(a.file).metadata.num_rows)
    elif a.cmd == "hex-positions":
        hex_positions(a.dir, a.positions, a.files, a.seed)
    else:
        same_bytes(a.a, a.b)


if __name__ == "__main__":
    main()

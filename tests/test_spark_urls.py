"""The Spark engine reading positions from URLs (`engines/spark_urls`, `engines/spark_hadoop`):
file:// URLs give the polars engine's tables on the same local files; objects on S3 (a real
moto server) are found by the driver and read by the executors' Python tasks with the run's
storage_options (CSV whole, Parquet by row groups; no Hadoop connector); the line for a
connector Spark lacks (here: hadoop-aws, which comes from Maven only), should Spark's reader
be given an object URL, names the package; hdfs:// is found
through Spark's JVM and read by Spark (a Hadoop file system built from tests/hadoop serves
local files under hdfs://), in local mode and on a standalone cluster; the same on a Spark
Connect server. One local[2] session serves the in-process tests; the others run the CLI in
new processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import invoke, said_lines
from polars.testing import assert_frame_equal

pytest.importorskip("pyspark")

from pipeline.config import config_from_dict  # noqa: E402
from pipeline.generate import Spec, generate  # noqa: E402
from pipeline.io.store.locations import Location  # noqa: E402
from pipeline.run import run_job  # noqa: E402

pytestmark = pytest.mark.spark
OUTPUTS = ("verdicts", "rejects", "sg_tables", "summary")


@pytest.fixture(scope="module")
def spark():
    from pipeline.engines.spark_session import session

    run = session("local[2]", {"spark.ui.enabled": "false"})
    yield run.spark
    run.stop(failed=False)


def dataset(base: Path, form: str, fmt: str) -> Path:
    """Generated rules and two positions files, plus a file of bad rows (a heap below zero,
    an unknown rule set) so that rejects are compared too."""
    generate(base, Spec(3000, 20, 300, 4, 0, 4, form, fmt, 5, "int", False, 2))
    if form == "wide":
        bad = pl.DataFrame({"rule_set_id": [1, 999, 3], "position_id": [900001, 900002, 9],
                            "heaps": [[3, -4], [5], [1, 2]]})
    else:
        bad = pl.DataFrame({"rule_set_id": [1, 999, 3], "position_id": [900001, 900002, 9],
                            "heap": [-4, 5, 7]})
    target = base / "positions" / f"part-99999.{fmt}"
    if fmt == "parquet":
        bad.write_parquet(target)
    else:
        if form == "wide":
            bad = bad.with_columns(pl.col("heaps").cast(pl.List(pl.String)).list.join(" "))
        bad.write_csv(target)
    return base


def tables(out: Path) -> dict[str, pl.DataFrame]:
    return {name: pl.read_parquet(out / f"{name}.parquet") for name in OUTPUTS}


def run(out: Path, engine: str, rules: str, positions: str, **more) -> dict:
    result = run_job(config_from_dict({"rules": rules, "positions": positions,
                                       "out": str(out), "engine": engine,
                                       "winning_moves": True, **more}))
    return result.manifest


def assert_same(want: dict[str, pl.DataFrame], have: dict[str, pl.DataFrame],
                sources: tuple[str, str] = ("", "")) -> None:
    for name in OUTPUTS:
        got = have[name]
        if "source" in got.columns and sources[0]:
            got = got.with_columns(pl.col("source").str.replace(sources[0], sources[1],
                                                                literal=True))
        try:
            assert_frame_equal(got, want[name], check_exact=True)
        except AssertionError as exc:
            raise AssertionError(f"{name}.parquet differs: {exc}") from None


# ---- file:// URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["wide", "long"])
@pytest.mark.parametrize("spec", ["prefix", "glob"])
def test_file_urls_give_the_polars_engines_tables_on_the_same_files(
        spark, tmp_path: Path, form: str, spec: str) -> None:
    data = dataset(tmp_path / "data", form, "parquet")
    positions = data / "positions"
    url = positions.as_uri() + ("/part-*.parquet" if spec == "glob" else "/")
    want = run(tmp_path / "polars", "polars", str(data / "rules.parquet"), str(positions))
    got = run(tmp_path / "spark", "spark", (data / "rules.parquet").as_uri(), url)
    assert_same(tables(tmp_path / "polars"), tables(tmp_path / "spark"))
    assert got["counts"] == want["counts"] and got["reconciled"] is True
    assert got["counts"]["positions"]["rows_rejected"] >= 2
    assert got["inputs"] == want["inputs"]
    assert [f["path"] for f in got["inputs"]["positions"]] == [
        str(positions / f"part-{n}.parquet") for n in ("00000", "00001", "99999")]
    assert (tmp_path / "spark" / "verdicts.parquet").is_dir()


def test_a_missing_file_url_exits_1_naming_it(spark, tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    missing = tmp_path / "nowhere" / "positions.parquet"
    code, err = invoke(["run", "--engine", "spark", "--rules", sample / "rules.csv",
                        "--positions", missing.as_uri(), "--out", tmp_path / "out"], tmp_path)
    assert code == 1, err
    assert err.strip().splitlines() == [  # the CLI reads file:///PATH as PATH
        f"snim-batch: error: positions input {missing}: no such file or directory"]
    assert not (tmp_path / "out").exists()


# ---- objects on S3 --------------------------------------------------------------------------


@pytest.fixture()
def s3_env(s3, monkeypatch: pytest.MonkeyPatch):
    """The standard AWS variables pointing at the moto server, for the driver's clients."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


def upload_tree(server, local: Path, prefix: str) -> None:
    client = server.client()
    for path in sorted(local.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), "bkt", f"{prefix}/{path.relative_to(local).as_posix()}")


@pytest.mark.parametrize("form", ["wide", "long"])
def test_csv_objects_are_read_by_executors_as_the_polars_engine_reads_the_files(
        spark, s3, tmp_path: Path, form: str) -> None:
    """The executors' Python workers reach the store with the run's storage_options (the
    driver's environment variables are not theirs); the manifest records each object's size
    and ETag as S3 reports them."""
    data = dataset(tmp_path / "data", form, "csv")
    upload_tree(s3, data, "in")
    options = {"storage_options": s3.storage_options()}
    run(tmp_path / "polars", "polars", str(data / "rules.csv"), str(data / "positions"))
    got = run(tmp_path / "spark", "spark", "s3://bkt/in/rules.csv", "s3://bkt/in/positions",
              **options)
    assert_same(tables(tmp_path / "polars"), tables(tmp_path / "spark"),
                ("s3://bkt/in/positions", str(data / "positions")))
    files = got["inputs"]["positions"]
    heads = [s3.client().head_object(Bucket="bkt", Key=f["path"].removeprefix("s3://bkt/"))
             for f in files]
    assert [f["path"] for f in files] == [
        f"s3://bkt/in/positions/part-{n}.csv" for n in ("00000", "00001", "99999")]
    assert [(f["size"], f["etag"]) for f in files] == [
        (h["ContentLength"], h["ETag"].strip('"')) for h in heads]
    assert all("sha256" not in f for f in files)  # it would read each object twice


@pytest.mark.parametrize("form", ["wide", "long"])
@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_parquet_objects_are_read_by_the_tasks_as_the_polars_engine_reads_the_files(
        spark, s3, tmp_path: Path, form: str, scheme: str) -> None:
    """Parquet objects are read by the tasks themselves, row group by row group, through the
    polars engine's reader with the run's storage_options: no Hadoop connector (hadoop-aws is
    not on this classpath), and the polars engine's tables on the same files (one in row
    groups of 500 rows, read by several tasks, each fetching its own groups)."""
    import pyarrow.parquet as pq

    data = dataset(tmp_path / "data", form, "parquet")
    grouped = data / "positions" / "part-00000.parquet"
    pl.read_parquet(grouped).write_parquet(grouped, row_group_size=500)
    assert pq.read_metadata(grouped).num_row_groups > 2
    upload_tree(s3, data, "in")
    options = {"storage_options": s3.storage_options()}
    want = run(tmp_path / "polars", "polars", str(data / "rules.parquet"),
               str(data / "positions"))
    got = run(tmp_path / "spark", "spark", f"{scheme}://bkt/in/rules.parquet",
              f"{scheme}://bkt/in/positions", **options)
    assert_same(tables(tmp_path / "polars"), tables(tmp_path / "spark"),
                (f"{scheme}://bkt/in/positions", str(data / "positions")))
    assert got["counts"] == want["counts"] and got["reconciled"] is True
    assert got["counts"]["positions"]["rows_rejected"] >= 2
    assert [f["path"] for f in got["inputs"]["positions"]] == [
        f"{scheme}://bkt/in/positions/part-{n}.parquet" for n in ("00000", "00001", "99999")]


@pytest.mark.parametrize(("positions", "message"), [
    ("s3://bkt/nope/p.parquet", "no such object or prefix"),
    ("s3://bkt/empty", "no .parquet, .pq or .csv objects found below this prefix (skipped 1"),
    ("s3://bkt/in/*.parquet", "no object matches this pattern"),
])
def test_missing_objects_exit_1_naming_the_url_as_with_polars(
        spark, s3_env, tmp_path: Path, positions: str, message: str) -> None:
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    s3_env.client().put_object(Bucket="bkt", Key="empty/_SUCCESS", Body=b"")
    for engine in ("polars", "spark"):
        code, err = invoke(["run", "--engine", engine, "--rules", sample / "rules.csv",
                            "--positions", positions, "--out", tmp_path / "out"], tmp_path)
        assert code == 1, err
        [line] = err.strip().splitlines()
        assert line.startswith(f"snim-batch: error: positions input {positions}: {message}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("url", "hadoop_url", "package"), [
    ("gs://bkt/in/p.parquet", "gs://bkt/in/p.parquet", "gcs-connector"),
    ("gcs://bkt/in/p.parquet", "gs://bkt/in/p.parquet", "gcs-connector"),
    ("abfss://box@acct.dfs.core.windows.net/in/p.parquet",
     "abfss://box@acct.dfs.core.windows.net/in/p.parquet", "hadoop-azure"),
    ("az://box/in/p.parquet", "abfss://box@acct.dfs.core.windows.net/in/p.parquet",
     "hadoop-azure"),
])
def test_each_store_is_read_through_its_hadoop_connector(spark, url: str, hadoop_url: str,
                                                         package: str) -> None:
    """The URL Spark is given for an object, and Spark's own failure to open it (no
    connector on this classpath) as the line naming the package."""
    from pipeline.engines.spark_urls import hadoop_url as mapped
    from pipeline.engines.spark_urls import read_problem
    from pipeline.io.store import object_store

    location = object_store.with_client_options(Location.parse(url, Path.cwd()),
                                  {"account_name": "acct"})
    assert mapped(location) == hadoop_url
    with pytest.raises(Exception) as raised:
        spark.read.parquet(hadoop_url)
    problem = read_problem(spark, location, raised.value)
    assert problem.exit_code == 2
    assert str(problem).startswith(f"positions input {url}: Spark has no connector for "
                                   f"{hadoop_url.split(':')[0]}:// (class ")
    assert package in str(problem) and "\n" not in str(problem)



# ---- hdfs:// --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_as_hdfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/hadoop/LocalAsHdfs.java built against pyspark's Hadoop jars: a Hadoop file
    system that serves this machine's files under hdfs://, so that the route through Spark's
    JVM (finding, probing and reading hdfs:// files) runs without a namenode. HDFS's own
    client is not what these tests test."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        pytest.skip("needs a JDK (javac, jar) to build the tests' Hadoop file system")
    import pyspark

    [api] = (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")
    build = tmp_path_factory.mktemp("hadoop")
    subprocess.run([javac, "-cp", str(api), "-d", str(build / "classes"),
                    str(Path(__file__).parent / "hadoop" / "LocalAsHdfs.java")], check=True)
    subprocess.run([jar, "cf", str(build / "local-as-hdfs.jar"), "-C", str(build / "classes"),
                    "."], check=True)
    return build / "local-as-hdfs.jar"


def hdfs_run(jar: Path, where: Path, rules: Path, positions: str, out: Path
             ) -> subprocess.CompletedProcess[str]:
    """The CLI in a new process (a JVM with the test file system on its classpath: after
    Spark's jars, by SPARK_DIST_CLASSPATH, so that the JVM starts from the tests' class
    archive, whose classpath must begin its own; docs/spark.md's `spark.driver.extraClassPath`
    puts it first, and has its own test)."""
    config = where / "hdfs.yaml"
    config.write_text("""spark:
  master: local[1]
  conf:
    spark.hadoop.fs.hdfs.impl: snimtest.LocalAsHdfs
    spark.ui.enabled: "false"
""")
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config), "--engine",
         "spark", "--winning-moves", "--rules", str(rules), "--positions", positions,
         "--out", str(out)],
        cwd=where, env={**os.environ, "PYTHONPATH": str(root), "SPARK_DIST_CLASSPATH": str(jar)},
        capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize(("form", "named"), [("wide", False), ("long", True)])
def test_hdfs_positions_are_found_and_read_through_sparks_jvm(
        local_as_hdfs: Path, tmp_path: Path, form: str, named: bool) -> None:
    """A prefix on a named namenode (long form) and a glob on the default one (wide; one
    Spark run each, 20-40 s apiece): the polars engine's tables on the same files, and the
    manifest lists each file with its size (HDFS has no ETag or version)."""
    data = dataset(tmp_path / "data", form, "parquet")
    positions = data / "positions"
    run(tmp_path / "polars", "polars", str(data / "rules.parquet"), str(positions))
    want = tables(tmp_path / "polars")
    spec, head = ((f"hdfs://nn:9000{positions}", "hdfs://nn:9000") if named
                  else (f"hdfs://{positions}/part-*.parquet", "hdfs://"))
    done = hdfs_run(local_as_hdfs, tmp_path, data / "rules.parquet", spec, tmp_path / "out")
    assert done.returncode == 3, done.stderr
    assert_same(want, tables(tmp_path / "out"), (head + str(positions), str(positions)))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    local = json.loads((tmp_path / "polars" / "manifest.json").read_text())
    held = [f["rows_in_source"] for f in local["inputs"]["positions"]]  # the footers' counts
    assert manifest["inputs"]["positions"] == [  # hdfs:// files are counted by Spark only
        {"path": f"{head}{positions}/part-{n}.parquet", "format": "parquet",
         "size": (positions / f"part-{n}.parquet").stat().st_size, "etag": None,
         "version": None, "rows_in_source": None, "rows_read": rows}
        for n, rows in zip(("00000", "00001", "99999"), held)]


def after_the_config_line(stderr: str) -> list[str]:
    """What a run with a config file said after naming it (progress lines aside)."""
    said, *rest = said_lines(stderr)
    assert said.startswith("snim-batch: config: "), stderr
    return rest


@pytest.mark.slow
def test_csv_and_missing_files_on_hdfs_are_one_line(local_as_hdfs: Path, tmp_path: Path
                                                     ) -> None:
    """CSV is refused (exit 2); a path that is not there exits 1 naming it."""
    data = dataset(tmp_path / "data", "wide", "csv")
    spec = f"hdfs://nn:9000{data / 'positions'}"
    done = hdfs_run(local_as_hdfs, tmp_path, data / "rules.csv", spec, tmp_path / "out")
    assert done.returncode == 2, done.stderr
    assert after_the_config_line(done.stderr) == [
        f"snim-batch: error: positions input {spec}/part-00000.csv: the Spark engine reads "
        "CSV in Python tasks, which cannot reach hdfs:// (only Spark's JVM can); convert it "
        "to Parquet, or put it on a shared path or an object store"]
    missing = f"hdfs://nn:9000{tmp_path / 'nowhere'}"
    done = hdfs_run(local_as_hdfs, tmp_path, data / "rules.csv", missing, tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert after_the_config_line(done.stderr) == [
        f"snim-batch: error: positions input {missing}: no such object or prefix"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_corrupt_page_on_hdfs_is_one_line_naming_the_file(local_as_hdfs: Path,
                                                            tmp_path: Path) -> None:
    """A data page header overwritten in the third row group of one of two files, read by
    Spark's JVM: exit 1 and one line naming that file as given (Spark names it URL-encoded:
    the folder has a space) and the reader's reason, nothing written (it was "internal
    error: Py4JJavaError" and a Java stack)."""
    import pyarrow.parquet as pq

    positions = tmp_path / "posi tions"
    positions.mkdir()
    n = 3000
    rows = pl.DataFrame({"rule_set_id": [1] * n, "position_id": list(range(n)),
                         "heaps": [[i % 9, 2] for i in range(n)]})
    rows.write_parquet(positions / "a.parquet", row_group_size=500)
    bad = positions / "b.parquet"
    rows.with_columns(pl.col("position_id") + n).write_parquet(
        bad, row_group_size=500, compression="uncompressed")
    offset = pq.read_metadata(bad).row_group(2).column(2).data_page_offset
    data = bytearray(bad.read_bytes())
    data[offset:offset + 16] = b"\xff" * 16
    bad.write_bytes(bytes(data))
    rules = tmp_path / "rules.csv"
    rules.write_text("rule_set_id,kind,moves\n1,,2 5\n")
    done = hdfs_run(local_as_hdfs, tmp_path, rules, f"hdfs://nn:9000{positions}",
                    tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert after_the_config_line(done.stderr) == [
        f"snim-batch: error: hdfs://nn:9000{bad}: Spark could not read this Parquet file "
        "(can not read class org.apache.parquet.format.PageHeader: don't know what type: 15)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("engine", ["polars", "spark"])
def test_hdfs_is_refused_where_spark_does_not_read_it(tmp_path: Path, engine: str) -> None:
    """Rules (read by this process), and positions for the polars engine: exit 2."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    rules, positions = ((sample / "rules.csv", "hdfs:///in/p.parquet") if engine == "polars"
                        else ("hdfs:///in/rules.csv", sample / "positions.parquet"))
    code, err = invoke(["run", "--engine", engine, "--rules", rules, "--positions", positions,
                        "--out", tmp_path / "out"], tmp_path)
    assert code == 2, err
    named = positions if engine == "polars" else rules
    assert err.strip().splitlines() == [
        f"snim-batch: error: {named}: hdfs:// is read only by the Spark engine, and only for "
        "positions (--engine spark, not Spark Connect); put the other inputs and --out on a "
        "local or shared path or an object store"]
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_namenode_is_one_line(spark, tmp_path: Path) -> None:
    """Nothing listens on the port: exit 1 at once, naming the URL."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    url = f"hdfs://127.0.0.1:{port}/in/p.parquet"
    code, err = invoke(["run", "--engine", "spark", "--rules", sample / "rules.csv",
                        "--positions", url, "--out", tmp_path / "out"], tmp_path)
    assert code == 1, err
    assert err.strip().splitlines() == [
        f"snim-batch: error: {url}: cannot connect to the object store while looking it up "
        "(connection refused)"]
    assert not (tmp_path / "out").exists()


def readme_block(marker: str) -> str:
    """docs/spark.md's shell lines from the comment line `marker` to the end of that command."""
    lines = (Path(__file__).resolve().parents[1] / "docs" / "spark.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == marker)
    end = start
    while lines[end].endswith("\\") or lines[end].startswith("#"):
        end += 1
    return "\n".join(lines[start:end + 1])


@pytest.mark.slow
def test_readme_hdfs_command_on_a_standalone_cluster(local_as_hdfs: Path, tmp_path: Path
                                                      ) -> None:
    """docs/spark.md's HDFS spark-submit command on a real Master and Worker: the driver finds
    the files through its JVM, the executor reads them (both with the test file system on
    their classpath), and the tables equal the polars engine's."""
    from spark_servers import StandaloneCluster, spark_env

    data = dataset(tmp_path / "data", "wide", "parquet")
    positions = data / "positions"
    run(tmp_path / "polars", "polars", str(data / "rules.parquet"), str(positions),
        winning_moves=False)
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "spark.executor.memory 512m\nspark.executor.cores 1\nspark.cores.max 1\n"
        "spark.driver.memory 1g\nspark.ui.enabled false\nspark.sql.shuffle.partitions 4\n"
        f"spark.local.dir {tmp_path}\nspark.driver.extraClassPath {local_as_hdfs}\n"
        f"spark.executor.extraClassPath {local_as_hdfs}\n"
        "spark.hadoop.fs.hdfs.impl snimtest.LocalAsHdfs\n")
    cluster = StandaloneCluster(tmp_path).start()
    try:
        import pipeline.cli

        env = spark_env(SPARK_CONF_DIR=str(conf), MASTER=cluster.url, PY=sys.executable,
                        CLI=pipeline.cli.__file__, RULES=str(data / "rules.parquet"),
                        HDFS_POSITIONS=f"{positions}/*.parquet", OUT=str(tmp_path / "spark"))
        block = readme_block("# positions on HDFS (Parquet): the HDFS client is in Spark's "
                             "own jars, nothing to add;")
        assert '--positions "hdfs://$HDFS_POSITIONS"' in block
        done = subprocess.run(["bash", "-euc", block], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        executors = list(cluster.work_dir.glob("app-*/*/stderr"))
    finally:
        cluster.stop()
    assert done.returncode == 3, done.stderr[-3000:]
    assert executors, "no executor ran on the worker"
    assert_same(tables(tmp_path / "polars"), tables(tmp_path / "spark"),
                (f"hdfs://{positions}", str(positions)))


@pytest.mark.slow
def test_positions_urls_through_spark_connect(s3, tmp_path: Path) -> None:
    """On a real Spark Connect server (the CLI in a subprocess: a Connect session changes
    pyspark's process-wide mode): CSV objects are read by the server's Python workers with the
    run's storage_options, as the polars engine reads the files, and so are Parquet objects
    (row groups read by the tasks, no Hadoop connector); hdfs:// is refused, this process
    having no JVM to find the files with."""
    pytest.importorskip("grpc")
    from spark_servers import ConnectServer, spark_env

    data = dataset(tmp_path / "data", "wide", "csv")
    upload_tree(s3, data, "in")
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    s3.client().upload_file(str(sample / "positions.parquet"), "bkt", "pq/p.parquet")
    run(tmp_path / "polars", "polars", str(data / "rules.csv"), str(data / "positions"))
    sample_run = run(tmp_path / "polars-pq", "polars", str(data / "rules.csv"),
                     str(sample / "positions.parquet"))
    config = tmp_path / "config.yaml"
    config.write_text("storage_options:\n" + "".join(
        f"  {key}: {json.dumps(value)}\n" for key, value in s3.storage_options().items()))
    (tmp_path / "connect").mkdir()
    server = ConnectServer(tmp_path / "connect").start()
    try:
        def cli(positions: str, out: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config),
                 "--engine", "spark", "--spark-remote", server.url, "--winning-moves",
                 "--rules", str(data / "rules.csv"), "--positions", positions, "--out", out],
                cwd=tmp_path, env=spark_env(), capture_output=True, text=True, timeout=600)

        done = cli("s3://bkt/in/positions", str(tmp_path / "spark"))
        parquet = cli("s3://bkt/pq/p.parquet", str(tmp_path / "parquet"))
        hdfs = cli("hdfs:///in/p.parquet", str(tmp_path / "hdfs"))
    finally:
        server.stop()
    assert done.returncode == 3, done.stderr[-3000:]
    assert_same(tables(tmp_path / "polars"), tables(tmp_path / "spark"),
                ("s3://bkt/in/positions", str(data / "positions")))
    assert parquet.returncode == sample_run["exit_code"], parquet.stderr[-3000:]
    assert_same(tables(tmp_path / "polars-pq"), tables(tmp_path / "parquet"),
                ("s3://bkt/pq/p.parquet", str(sample / "positions.parquet")))
    assert hdfs.returncode == 2, hdfs.stderr[-3000:]
    assert hdfs.stderr.strip().splitlines() == [
        f"snim-batch: config: {config}",
        "snim-batch: error: hdfs:///in/p.parquet: hdfs:// is read only by the Spark engine, and "
        "only for positions (--engine spark, not Spark Connect); put the other inputs and --out "
        "on a local or shared path or an object store"]
    assert not (tmp_path / "hdfs").exists()


def test_a_file_gone_before_spark_reads_it_is_one_line(spark, tmp_path: Path) -> None:
    """Found by the driver, then removed before Spark opened it: Spark's own error, as one
    line naming the input."""
    from pipeline.engines.spark_urls import read_problem

    gone = tmp_path / "gone.parquet"
    with pytest.raises(Exception) as raised:
        spark.read.parquet(str(gone))
    problem = read_problem(spark, gone, raised.value)
    assert (problem.exit_code, str(problem)) == (
        1, f"positions input {gone}: no such object or file")

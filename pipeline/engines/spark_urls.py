"""Positions that Spark reads itself: the URL Spark's Hadoop connectors read for an input,
and Spark's failures to reach it as one line.

The driver finds the objects of a prefix or glob (`io.remote_inputs`, the polars engine's
rules: hidden names, snim-batch outputs and the run's own output skipped, `**` at any depth)
and reads only their Parquet footers. The engine gives Spark's reader only what Python cannot
open: `hdfs://` files (`spark_hadoop`); objects in s3/gs/az and local files are read by the
Python tasks with the run's `storage_options` (`spark_tasks.row_groups_task`, `csv_task`),
so they need no Hadoop connector. The connectors' URLs (`s3://` as Hadoop's `s3a://`;
`gs://`; `az://` as `abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/`) and the line for a
missing one remain for Spark's reader given such a URL. See docs/ARCHITECTURE.md, *Where each
engine differs*.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, UsageError, truncated
from pipeline.io.read.files import Source
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location

CONNECTORS = {
    # Hadoop scheme -> (the Maven package that brings its file system, what else it needs)
    "s3a": ("org.apache.hadoop:hadoop-aws:{hadoop}", ""),
    "abfss": ("org.apache.hadoop:hadoop-azure:{hadoop}", ""),
    "gs": ("com.google.cloud.bigdataoss:gcs-connector:hadoop3-2.2.26",
           " and spark.hadoop.fs.gs.impl=com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"),
}
"""What `spark.jars.packages` must name for Spark to read each scheme."""


_MISSING_CONNECTOR = re.compile(r"ClassNotFoundException: Class (\S+) not found"
                                r"|No FileSystem for scheme \"?(\w+)\"?")


def hadoop_url(source: Source) -> str:
    """What Spark's reader is given for one input: a local path as it is, an object as the
    URL of its Hadoop connector (s3a://, gs://, abfss://)."""
    if not isinstance(source, Location):
        return str(source)
    key = f"/{source.key}" if source.key else ""
    if source.scheme == "s3":
        return f"s3a://{source.bucket}{key}"
    if source.scheme == "gs":
        return f"gs://{source.bucket}{key}"
    if source.scheme == "az":
        lowered = {name.lower(): value for name, value in source.options}
        account = source.account or object_store.azure_account(lowered)
        return f"abfss://{source.bucket}@{account}.dfs.core.windows.net{key}"
    return f"hdfs://{source.bucket}{key}"  # found through Spark's JVM: `spark_hadoop`


def hadoop_version(spark: Any) -> str:
    """The Hadoop version of Spark's own jars: the session's JVM when this process has one,
    else the pyspark install's hadoop-client-api jar ("3.x" when neither says)."""
    try:
        return str(spark._jvm.org.apache.hadoop.util.VersionInfo.getVersion())
    except Exception:  # noqa: BLE001 - Spark Connect has no JVM here
        pass
    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars",
                                  "hadoop-client-api-*.jar"))
    found = [Path(j).stem.removeprefix("hadoop-client-api-") for j in jars]
    return found[0] if found else "3.x"


def connector_problem(spark: Any, source: Source, exc: BaseException) -> UsageError | None:
    """`exc` as one line when it says Spark has no file system for `source`'s scheme (its
    connector is not on the classpath): the URL and the setting that brings it."""
    match = _MISSING_CONNECTOR.search(str(exc))
    if match is None:
        return None
    url = hadoop_url(source)
    scheme = url.split("://", 1)[0] if "://" in url else "file"
    package, more = CONNECTORS.get(scheme, ("", ""))
    setting = (f"add spark.jars.packages={package.format(hadoop=hadoop_version(spark))}{more} "
               "to spark.conf in config.yaml (or spark-submit --packages)") if package \
        else "add the jar of its Hadoop file system to Spark's classpath"
    cause = (f"class {match.group(1)} not found" if match.group(1)
             else f"no file system for {match.group(2)}://")
    return UsageError(f"positions input {source}: Spark has no connector for {scheme}:// "
                      f"({cause}); {setting}")


def read_problem(spark: Any, source: Source, exc: BaseException) -> UsageError | InputError:
    """Spark's failure to open `source` (a missing connector, a missing object, refused
    access) as one line naming it."""
    problem = connector_problem(spark, source, exc)
    if problem is not None:
        return problem
    text = object_store.redacted(_cause(exc),
                                 dict(source.options) if isinstance(source, Location) else {})
    if "PATH_NOT_FOUND" in text or "does not exist" in text.lower():
        return InputError(f"positions input {source}: no such object or file")
    return InputError(f"positions input {source}: Spark could not read it ({text})")


def _cause(exc: BaseException) -> str:
    """The first line of `exc` that says something: py4j's errors start with "An error
    occurred while calling oNN.parquet." and name the Java exception on the next line."""
    for line in str(exc).splitlines():
        line = line.strip().lstrip(": ").strip()
        if line and not line.startswith("An error occurred while calling"):
            return truncated(line, 200)
    return type(exc).__name__

"""Build the class-data archive that the tests' Spark JVMs start from (`make test` runs this once
per install; tests/conftest.py hands it to every JVM the tests start).

Most of a short Spark run's CPU goes to the JVM itself: loading and verifying Spark's classes,
then compiling them. The tests start dozens of JVMs (a session per module, a CLI process per
signal or failure test, standalone clusters, Connect servers), so the suite pays that many
times over on a 2-core machine. A dynamic class-data-sharing archive (JDK 13+) of the classes a
sample run through `spark-submit` loads lets each later JVM map them instead. Nothing about
what Spark does changes: a JVM whose classpath or JDK does not match the archive ignores it.

    python tests/spark_class_archive.py ARCHIVE
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from spark_servers import ROOT, spark_bin, spark_env


def build(archive: Path) -> None:
    """One spark-submit of the CLI on the bundled sample, dumping its classes at exit; the
    archive appears whole (renamed into place) or not at all. One partial name: a build
    killed before the rename leaves its partial for the next build to replace, not to add
    to (a few hundred MB each)."""
    partial = archive.with_name(f"{archive.name}.partial")
    partial.unlink(missing_ok=True)
    sample = ROOT / "data" / "sample"
    with tempfile.TemporaryDirectory(prefix="snim-batch-cds-") as work:
        done = subprocess.run(
            [spark_bin("spark-submit"), "--master", "local[2]",
             "--driver-java-options", f"-XX:ArchiveClassesAtExit={partial}",
             "--conf", "spark.ui.enabled=false", "--conf", f"spark.local.dir={work}",
             str(ROOT / "pipeline" / "cli.py"), "run", "--engine", "spark", "--winning-moves",
             "--rules", str(sample / "rules.csv"), "--positions",
             str(sample / "positions.parquet"), "--out", str(Path(work) / "out"), "--quiet"],
            env=spark_env(), cwd=work, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        sys.exit(f"spark_class_archive: the sample run through spark-submit exited "
                 f"{done.returncode} without an archive:\n{done.stderr[-3000:]}")
    # a cut or damaged archive crashes every JVM given it (SIGBUS), so one is tried first
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else "java"  # the one Spark starts
    tried = subprocess.run([java, f"-XX:SharedArchiveFile={partial}", "-Xshare:auto",
                            "-version"], capture_output=True, text=True, timeout=120)
    if tried.returncode != 0:
        partial.unlink(missing_ok=True)
        sys.exit(f"spark_class_archive: a JVM given the archive exited {tried.returncode}:\n"
                 f"{tried.stdout[-2000:]}{tried.stderr[-2000:]}")
    os.replace(partial, archive)


if __name__ == "__main__":
    build(Path(sys.argv[1]).resolve())

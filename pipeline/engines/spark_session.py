"""The Spark session the engine runs in, and Spark's failures as one-line errors.

A session snim-batch starts itself gets working defaults (a driver heap sized to the machine,
a quiet JVM whose own log goes to a file unless --verbose), so that a run needs no Spark
settings. A failure outside the data (the JVM or an executor out of memory, a lost executor,
a crashed Python worker, a JVM that died) becomes a `SparkFailure` naming the setting to change.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from pyspark import SparkContext
from pyspark.sql import SparkSession

from pipeline.config import hidden_master
from pipeline.engines.spark_connect import is_connect
from pipeline.errors import InputError, SnimError, SparkFailure, truncated

log = logging.getLogger(__name__)
GIB = 2**30
MAX_DEFAULT_DRIVER_GIB = 32
SESSION_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "ERROR",
    # let adaptive execution coalesce the shuffle partitions of cached frames too: each
    # partition is a Python task, and 200 near-empty ones cost seconds on small inputs
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    # the Python steps pay a fixed cost per Arrow batch (polars and kernel calls): batches of
    # 128Ki rows instead of Parquet's 4096 and Arrow's 10,000 (a few MB each)
    "spark.sql.parquet.columnarReaderBatchSize": str(1 << 17),
    "spark.sql.execution.arrow.maxRecordsPerBatch": str(1 << 17),
    "spark.sql.inMemoryColumnarStorage.batchSize": str(1 << 17),
}
_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer
logger.pyspark.level = error
"""
_JVM_LOG_TAIL = 1 << 20  # bytes of the JVM's log searched for the cause of a failure


@dataclass
class Session:
    """A SparkSession and what the run knows about how it was started."""

    spark: SparkSession
    owned: bool  # started here (and stopped here), else the active one (spark-submit's)
    local: bool  # local mode: the driver JVM runs every task
    driver_memory: str | None  # the heap of a driver JVM started here, as configured
    jvm_log: Path | None = None  # where the JVM's stderr goes (None: the terminal)

    def stop(self, failed: bool, stopped: bool = False) -> None:
        """Stop a session started here; the JVM log is removed unless the run failed (a run
        `stopped` by a signal is not a failure to look into). A JVM that already died is not
        an error here (the run's failure says why). A stopped run in local mode ends its
        JVM too (`_end_jvm`)."""
        if self.owned:
            with warnings.catch_warnings(), _root_logging_held():
                warnings.simplefilter("ignore")
                try:
                    self.spark.stop()
                except Exception as exc:  # noqa: BLE001 - the JVM may be gone
                    log.debug("stopping Spark: %s", exc)
            if stopped and self.local:
                _end_jvm()
        if self.jvm_log is not None and (stopped or not failed):
            self.jvm_log.unlink(missing_ok=True)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The session for a block, stopped after it (`stop`): failed if the block raised,
        stopped if a Ctrl-C or stop signal (`Stopped`, a KeyboardInterrupt) ended it. A
        failure of the run's own (its input, its output: a SnimError other than a
        `SparkFailure`, whose message names the JVM log) is no failure of Spark's: its log,
        which that message does not name, is removed as after a clean run."""
        failed, stopped = True, False
        try:
            yield
            failed = False
        except KeyboardInterrupt:
            stopped = True
            raise
        except SnimError as exc:
            failed = isinstance(exc, SparkFailure)
            raise
        finally:
            self.stop(failed, stopped)


TASKS_END_TIMEOUT_S = 30.0  # the longest a failed or stopped run waits for its tasks to end
_JOB_GROUP_KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


@contextlib.contextmanager
def jobs_ended_on_failure(spark: SparkSession) -> Iterator[None]:
    """The run's jobs in a job group of their own (the thread's group before is set back
    after). On the way out with an error or a stop, the group's jobs are cancelled and their
    running tasks waited for, up to TASKS_END_TIMEOUT_S, before the caller goes on to remove
    the staging directory: on a standalone cluster an executor's task, still running when
    the driver stopped, wrote its file into that directory a second after it was removed.
    On Spark Connect (no SparkContext, no status tracker) nothing is done here: on a stop
    pyspark's client cancels the running operation, and the session is released
    (`Session.stop`), without a wait for the server's tasks."""
    if is_connect(spark):
        yield
        return
    sc = spark.sparkContext
    saved = {key: sc.getLocalProperty(key) for key in _JOB_GROUP_KEYS}
    group = f"snim-batch-{os.getpid()}-{time.time_ns()}"
    sc.setJobGroup(group, "snim-batch run", interruptOnCancel=True)
    try:
        yield
    except BaseException:
        _cancel_and_wait(sc, group, TASKS_END_TIMEOUT_S)
        raise
    finally:
        with contextlib.suppress(Exception):  # the JVM may be gone
            for key, value in saved.items():
                sc.setLocalProperty(key, value)


def _cancel_and_wait(sc: SparkContext, group: str, timeout: float) -> None:
    """Cancel the job group's jobs, then wait until none of them runs and their stages have
    no task running, at most `timeout` seconds; nothing if the JVM is gone. A job ends in the
    status tracker after the starts of the tasks it launched, and a killed task counts as
    running until its thread has ended."""
    try:
        sc.cancelJobGroup(group)
        tracker = sc.statusTracker()
        jobs = tracker.getJobIdsForGroup(group)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(_job_running(tracker, job) for job in jobs):
                return
            time.sleep(0.05)
        log.debug("Spark tasks still running %.0f s after the run's jobs were cancelled",
                  timeout)
    except Exception as exc:  # noqa: BLE001 - a dead JVM: no task of it runs
        log.debug("cancelling the run's Spark jobs: %s", exc)


def _job_running(tracker: object, job: int) -> bool:
    """Whether the job runs, or a stage of it has a task running."""
    info = tracker.getJobInfo(job)
    if info is None:
        return False
    if info.status == "RUNNING":
        return True
    stages = (tracker.getStageInfo(stage) for stage in info.stageIds)
    return any(stage is not None and stage.numActiveTasks > 0 for stage in stages)


def _end_jvm(grace: float = 10.0) -> None:
    """End the JVM this process started for Spark (local mode: it runs every task), and wait
    for it, so that none of its tasks writes after the stopped run has removed its staging
    directory (one did, before the run waited for its tasks). A later session in this
    process starts a JVM of its own."""
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    SparkContext._gateway = None  # first: a later session must not reuse it, whatever follows
    SparkContext._jvm = None
    with contextlib.suppress(Exception):
        gateway.shutdown()
    with contextlib.suppress(OSError):
        proc.stdin.close()  # the JVM's gateway exits at the end of its stdin
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _forget_dead_gateway() -> None:
    """pyspark keeps the gateway of a JVM whose start failed or was stopped, and a later
    session would reuse it: forgotten once its process has ended."""
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None and proc.poll() is not None:
        SparkContext._gateway = None
        SparkContext._jvm = None


@contextlib.contextmanager
def _root_logging_held() -> Iterator[None]:
    """py4j reports a dead JVM, or an interrupt while it waits on the JVM, with
    `logging.exception` on the root logger, which, with no handler there, installs one that
    prints to stderr; a null handler keeps it from that."""
    root = logging.getLogger()
    guard = None if root.handlers else logging.NullHandler()
    if guard is not None:
        root.addHandler(guard)
    try:
        yield
    finally:
        if guard is not None:
            root.removeHandler(guard)


def total_memory() -> int:
    """This machine's physical memory in bytes (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def default_driver_memory(total: int) -> str:
    """A quarter of the machine's memory, in whole GiB (1g to 32g): in local mode the driver
    JVM runs every task, and Spark's own default (1g) fails on 10M positions. The JVM takes
    heap only as it needs it; the Python workers and the OS keep the rest."""
    return f"{max(1, min(total // 4 // GIB, MAX_DEFAULT_DRIVER_GIB))}g"


def _spark_defaults() -> str:
    """The text of the spark-defaults.conf that spark-submit would read ('' if none)."""
    home = os.environ.get("SPARK_HOME")
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (str(Path(home) / "conf") if home else None)
    if conf_dir is None:
        return ""
    try:
        return (Path(conf_dir) / "spark-defaults.conf").read_text(errors="replace")
    except OSError:
        return ""


def driver_memory_given(conf: dict[str, str]) -> bool:
    """Did the user size the driver: in spark.conf, SPARK_DRIVER_MEMORY, PYSPARK_SUBMIT_ARGS
    or spark-defaults.conf? Then their value stands."""
    if "spark.driver.memory" in conf or os.environ.get("SPARK_DRIVER_MEMORY"):
        return True
    submit = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    if any(a == "--driver-memory" or "spark.driver.memory=" in a for a in submit):
        return True
    return re.search(r"^\s*spark\.driver\.memory\b", _spark_defaults(), re.M) is not None


@contextlib.contextmanager
def _stderr_to(path: Path | None) -> Iterator[None]:
    """File descriptor 2 pointed at `path` for the duration (None: unchanged): a JVM started
    meanwhile inherits it as its stderr, and so do the Python workers it forks."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as target:
            os.dup2(target.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _quiet_log4j() -> dict[str, str]:
    """A log4j2 configuration (errors only, to stderr) unless the site has its own."""
    if "SPARK_CONF_DIR" in os.environ:
        return {}
    log4j = Path(tempfile.gettempdir()) / f"snim-batch-log4j2-{os.getuid()}.properties"
    if not log4j.exists() or log4j.read_text() != _LOG4J:
        # whole or not at all: another run starting Spark may be reading it
        partial = log4j.with_name(f"{log4j.name}.{os.getpid()}.partial")
        partial.write_text(_LOG4J)
        os.replace(partial, log4j)
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j.as_uri()}"}


def _silence_accumulator_errors(spark: SparkSession) -> None:
    """pyspark's accumulator server prints a traceback to stderr when the JVM dies mid-job;
    the run's own error says what happened, so the traceback goes to the debug log."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, address: log.debug(
            "Spark accumulator connection from %s failed", address)


def session(master: str, conf: dict[str, str] | None = None,
            quiet_jvm: bool = True) -> Session:
    """The active SparkSession (not owned), else a new quiet one for `master` (owned).

    A new session logs errors only, shows no progress bars, runs its Python workers with this
    interpreter (unless PYSPARK_PYTHON says otherwise) and, unless the user sized it, gets a
    driver heap of `default_driver_memory`. With `quiet_jvm` the JVM's stderr (its log, and
    its stack traces) goes to a file, kept and named in the error if the run fails.
    """
    conf = dict(conf or {})
    active = SparkSession.getActiveSession()
    if active is None and SparkContext._active_spark_context is not None:  # another thread
        active = SparkSession.builder.getOrCreate()
    if active is not None:
        sc = active.sparkContext
        return Session(active, False, sc.master.startswith("local"),
                       sc.getConf().get("spark.driver.memory", "1g"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("snim-batch")
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the JVM runs: spark-submit's settings
    if not submitted:
        builder = builder.master(master)
    settings = {**SESSION_CONF, **_quiet_log4j()}
    if not submitted and not driver_memory_given(conf):
        settings["spark.driver.memory"] = default_driver_memory(total_memory())
    settings.update(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    jvm_log = None
    if quiet_jvm and not submitted:
        handle, name = tempfile.mkstemp(prefix="snim-batch-spark-", suffix=".log")
        os.close(handle)
        jvm_log = Path(name)
    before = _children(os.getpid())
    sigint = _sigint_action()
    try:
        with _stderr_to(jvm_log), _root_logging_held():
            spark = builder.getOrCreate()
    except BaseException as exc:
        # a stop while the JVM started: pyspark forgets it, and it outlived the run
        _end_processes(_children(os.getpid()) - before)
        _forget_dead_gateway()
        if isinstance(exc, KeyboardInterrupt) and jvm_log is not None:
            jvm_log.unlink(missing_ok=True)  # not a failure to look into
        raise _start_failure(exc, jvm_log) from exc
    finally:
        _set_sigint_action(sigint)
    _silence_accumulator_errors(spark)
    sc = spark.sparkContext
    memory = sc.getConf().get("spark.driver.memory", "1g")
    log.info("Spark %s at %s, driver memory %s%s", spark.version, hidden_master(sc.master),
             memory, f", JVM log {jvm_log}" if jvm_log else "")
    return Session(spark, True, sc.master.startswith("local"), memory, jvm_log)


def _sigint_action() -> object:
    """SIGINT's action in this process (None outside the main thread, where it cannot be set):
    a new SparkContext sets its own, which raises wherever it lands, cancels every job
    and, unlike the CLI's, runs even where SIGINT was ignored; it is set back after."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGINT)


def _set_sigint_action(action: object) -> None:
    if action is not None:
        signal.signal(signal.SIGINT, action)


def _children(pid: int) -> set[int]:
    """The processes `pid` started, and theirs, as /proc lists them (none without it)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        parents.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _end_processes(pids: set[int], grace: float = 5.0) -> None:
    """SIGTERM to each of `pids` (a JVM runs its shutdown hooks), SIGKILL to any still
    running after `grace` seconds; those that are this process's children are waited for."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        if _running(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):  # this process's own child: waited for
            os.waitpid(pid, 0)


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not waited for, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _start_failure(exc: BaseException, jvm_log: Path | None) -> BaseException:
    """A JVM that would not start, as one line with the first error it logged."""
    if isinstance(exc, KeyboardInterrupt):
        return exc
    tail = _read_tail(jvm_log)
    logged = _first_error(tail) or _first_logged_error(tail)
    try:
        own = str(exc).strip()
    except Exception:  # noqa: BLE001 - py4j's str() calls the JVM, which may be gone
        own = ""
    cause = logged or truncated(own.splitlines()[0] if own else type(exc).__name__, 200)
    where = f" (Spark's log: {jvm_log})" if jvm_log else ""
    if re.search(_TOO_SMALL, cause):
        return SparkFailure(f"Spark could not start: {cause}; raise spark.driver.memory "
                            f"(spark.conf in config.yaml; at least 512m){where}")
    return SparkFailure(f"Spark could not start: {cause}; check spark.master and spark.conf"
                        f" (and that Java 17+ is installed){where}")


def _read_tail(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _JVM_LOG_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _first_error(text: str) -> str:
    """The first Java exception named at the start of a line of `text` (its class without
    the package, and its message), cut short; '' if none."""
    found = re.search(r'^(?:Caused by: |Exception in thread "[^"\n]*" )?(?:[\w$]+\.)*'
                      r"([\w$]+(?:Exception|Error)\b.*)$", text, re.M)
    return truncated(found.group(1).strip(), 200) if found else ""


def _first_logged_error(text: str) -> str:
    """The message of the first ERROR line log4j wrote in `text` (a standalone master that
    never answered is logged so, with no exception), cut short; '' if none."""
    found = re.search(r"^\S+ \S+ ERROR [\w$.]+: (.+)$", text, re.M)
    return truncated(found.group(1).strip(), 200) if found else ""


def _exception_text(exc: BaseException) -> str:
    """Every message in the exception's chain (a Py4J error of a dead JVM cannot say its
    own: its str() fails)."""
    parts = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            parts.append(f"{type(current).__name__}: {current}")
        except Exception:  # noqa: BLE001 - py4j's str() calls the dead JVM
            parts.append(type(current).__name__)
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _matching_line(pattern: str, text: str) -> str:
    """From the first match of `pattern` in `text` to the end of its line, cut short."""
    found = re.search(rf"(?:{pattern})[^\n]*", text)
    return truncated(found.group().strip(), 160) if found else ""


_TOO_SMALL = r"INVALID_DRIVER_MEMORY|Insufficient driver memory|OutOfMemoryError"
_OOM = r"(?:java\.lang\.)?OutOfMemoryError|GC overhead limit exceeded"
_PYTHON_CRASH = r"Python worker exited unexpectedly|Python worker .*crashed|MemoryError"
_EXECUTOR_LOST = (r"ExecutorLostFailure|Executor heartbeat timed out|exceeding memory limits|"
                  r"Container killed|Lost executor")
_JVM_GONE = (r"ConnectionRefusedError|ConnectionResetError|BrokenPipeError|Py4JNetworkError|"
             r"Answer from Java side is empty|Java gateway process exited|"
             r"SparkContext was shut down|Cannot call methods on a stopped SparkContext")


def failure(exc: BaseException, run: Session) -> SparkFailure | None:
    """The one-line error for a Spark failure outside the data, or None (not one of those)."""
    text = _exception_text(exc)
    if isinstance(exc, (KeyboardInterrupt, SnimError)):
        return None
    logged = _read_tail(run.jvm_log)
    where = f" (Spark's log: {run.jvm_log})" if run.jvm_log else ""
    memory = f", now {run.driver_memory}" if run.driver_memory else ""
    driver = ("raise spark.driver.memory (spark.conf in config.yaml, or spark-submit "
              f"--driver-memory{memory})")
    oom = _matching_line(_OOM, text) or _matching_line(_OOM, logged)
    if oom:
        if run.local:
            return SparkFailure(f"Spark ran out of memory in the driver JVM, which runs every "
                                f"task in local mode ({oom})", written=False,
                                hint=f": {driver}{where}")
        return SparkFailure(f"Spark ran out of memory ({oom})", written=False,
                            hint=": raise spark.executor.memory (executors) or "
                            f"spark.driver.memory (the driver{memory}){where}")
    crash = _matching_line(_PYTHON_CRASH, text)
    if crash:
        return SparkFailure(f"a Spark Python worker crashed ({crash})", written=False,
                            hint=": give the Python workers more memory (spark.executor."
                            "memoryOverhead, or spark.executor.pyspark.memory; in local mode, "
                            f"free memory on this machine){where}")
    lost = _matching_line(_EXECUTOR_LOST, text)
    if lost:
        return SparkFailure(f"Spark lost an executor ({lost})", written=False,
                            hint=": raise spark.executor.memory and spark.executor."
                            f"memoryOverhead, or see the executor's log on the cluster{where}")
    gone = _matching_line(_JVM_GONE, text)
    if gone:
        cause = _first_error(logged) or "it logged no error"
        return SparkFailure(f"the Spark driver JVM stopped during the run ({cause})",
                            written=False, hint=f": if it ran out of memory, {driver}{where}")
    return None


_FAILED_READ = r"\[FAILED_READ_FILE[^\]]*\] Encountered error while reading file (\S+?)\.?\s"
_JAVA_CAUSE = r"Caused by: (?:[\w$.]+(?:Exception|Error): )?([^\n]+)"


def unreadable_file(exc: BaseException) -> InputError | None:
    """A file that Spark's own reader (hdfs://) failed on while the job ran (a corrupt page,
    a file removed meanwhile) as one line: the file, as given (Spark names it URL-encoded),
    and the reader's reason."""
    if isinstance(exc, (KeyboardInterrupt, SnimError)):
        return None
    text = _exception_text(exc)
    found = re.search(_FAILED_READ, text)
    if found is None:
        return None
    cause = re.search(_JAVA_CAUSE, text)
    reason = truncated(cause.group(1).strip(), 160) if cause else "no reason given"
    return InputError(f"{unquote(found.group(1))}: Spark could not read this Parquet file "
                      f"({reason})")


@contextlib.contextmanager
def failures_named(run: Session) -> Iterator[None]:
    """Spark's failures outside the data re-raised as `SparkFailure`, and a file its reader
    failed on as `InputError`; the rest unchanged. py4j's own reports on the root logger
    are kept from stderr meanwhile (`_root_logging_held`): a stop signal landing while it
    waited on the JVM printed "KeyboardInterrupt while sending command" and a traceback
    above the run's one line."""
    with _root_logging_held():
        try:
            yield
        except BaseException as exc:
            mapped = unreadable_file(exc) or failure(exc, run)  # str() calls a dead JVM
            if mapped is None:
                raise
            raise mapped from exc


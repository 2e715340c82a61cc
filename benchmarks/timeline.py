"""Where a run's wall time goes: `snim-batch run ARGS...` in this process, with the start and
end of its main steps (seconds since the process started, and the thread that ran each)
printed to stderr, in order. Steps run once a batch are summed into one line each.

    cd CHECKOUT && python /work/main/benchmarks/timeline.py run --rules R --positions P \\
        --out OUT --overwrite --quiet --no-winning-moves

With TIMELINE_EACH=1 in the environment, every call of a per-batch step gets a line of its
own (which thread waited for which, batch by batch).

It imports `pipeline` from the current directory, and its heavy modules before the command
runs (to time their functions), so the garbage collector's pause around those imports
(`terminal.heavy_imports`) does not cover them here. Timers, not a sampling profiler: py-spy's
line attribution put 0.8 s on a step that these timers measured at 0.11-0.15 s. Steps run
once a batch show the thread of their first call.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time

sys.path.insert(0, os.getcwd())
START = time.perf_counter()  # about 25 ms after the interpreter started

try:  # the executable's environment (allocator, thread pools), before polars is imported
    from pipeline.terminal import set_process_defaults  # noqa: E402
except ImportError:  # an older checkout: cli.main set the thread pools itself
    pass
else:
    set_process_defaults()

import pipeline.engines.polars_engine as polars_engine  # noqa: E402
import pipeline.kernels as kernels  # noqa: E402
import pipeline.run as run  # noqa: E402
import pipeline.tables as tables  # noqa: E402
import pipeline.transforms.evaluate as evaluate  # noqa: E402
import pipeline.transforms.normalize as normalize  # noqa: E402
import pipeline.transforms.ordering as ordering  # noqa: E402
import pipeline.transforms.outputs as outputs  # noqa: E402
from pipeline.cli import main  # noqa: E402

ONCE = [(run, "execute"), (run, "read_rules"), (normalize, "rule_index"),
        (run, "table_cache"), (run, "_checksums"),
        (tables.TableCache, "presize"), (tables.TableCache, "_probe_periods"),
        (ordering, "key_sorted_verdicts"), (kernels, "counting_sort"), (kernels, "fill_runs"),
        (ordering, "_repeated_keys"), (kernels, "scatter"), (ordering, "split_duplicates"),
        (polars_engine.PolarsEvaluation, "counts"), (outputs, "summary_rows"),
        (outputs, "sg_table_rows"), (outputs, "rule_ids_as_codes"),
        (polars_engine, "sink_parquet"), (polars_engine, "write_parquet")]
PER_BATCH = [(normalize, "normalize_positions"), (evaluate, "attach_tables"),
             (polars_engine, "_evaluated"), (ordering, "verdict_part")]
steps: list[tuple[float, float, str, str]] = []


def timed(owner: object, name: str) -> None:
    work = getattr(owner, name, None)
    if work is None:  # a step this checkout does not have
        print(f"(no {name} to time here)", file=sys.stderr)
        return

    @functools.wraps(work)
    def step(*args, **kwargs):
        began = time.perf_counter() - START
        try:
            return work(*args, **kwargs)
        finally:
            steps.append((began, time.perf_counter() - START,
                          threading.current_thread().name, name))

    setattr(owner, name, step)


def report() -> None:
    per_batch = set() if os.environ.get("TIMELINE_EACH") else {name for _, name in PER_BATCH}
    summed: dict[str, list] = {}
    for began, ended, thread, name in sorted(steps):
        if name in per_batch:
            first, last, total, calls, _ = summed.get(name, [began, ended, 0.0, 0, thread])
            summed[name] = [first, ended, total + ended - began, calls + 1, thread]
        else:
            print(f"{began:7.3f} {ended:7.3f} {ended - began:7.3f}  {thread:12.12} {name}",
                  file=sys.stderr)
    for name, (first, last, total, calls, thread) in summed.items():
        print(f"{first:7.3f} {last:7.3f} {total:7.3f}  {thread:12.12} {name} "
              f"({calls} calls, first to last)", file=sys.stderr)


def run_job(*args, **kwargs):
    try:
        return job(*args, **kwargs)
    finally:
        print(f"run_job ended at {time.perf_counter() - START:.3f} s", file=sys.stderr)
        report()


for owner, name in ONCE + PER_BATCH:
    timed(owner, name)
job, run.run_job = run.run_job, run_job
if __name__ == "__main__":
    sys.exit(main())

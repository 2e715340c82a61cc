"""Time a snim-batch command spends in Python's cyclic garbage collector.

    python benchmarks/gc_time.py run --rules R --positions P --out O --overwrite --quiet
    python benchmarks/gc_time.py solve < input.txt > /dev/null

Runs the CLI's typer app in this process, with the environment the executable sets
(`terminal.set_process_defaults`: spinning OpenMP workers would inflate the timed collections)
and a `gc.callbacks` timer, and prints the command's wall time and the part of it spent in
collections, on stderr.
"""

from __future__ import annotations

import gc
import sys
import time

spent = {"seconds": 0.0, "collections": 0}
_started = [0.0]


def _timer(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        spent["seconds"] += time.perf_counter() - _started[0]
        spent["collections"] += 1


if __name__ == "__main__":
    gc.callbacks.append(_timer)
    began = time.perf_counter()
    from pipeline.terminal import set_process_defaults

    set_process_defaults()
    from pipeline.cli import app

    try:
        app()
    except SystemExit:
        pass
    print(f"wall {time.perf_counter() - began:.3f} s, in collections {spent['seconds']:.3f} s "
          f"({spent['collections']} collections)", file=sys.stderr)

"""Wall time and CPU seconds of a command's whole process tree (the Spark JVM and its Python
workers included, which the command's own rusage does not count: the driver does not reap
the JVM). On a machine other jobs share, the CPU seconds are the steadier measure.

    tree_cpu.py CMD [ARG ...]     prints "wall=<s> cpu=<s> rc=<exit code>"

The tree is polled from /proc every 0.1 s (Linux only); a process's last 0.1 s before it
exits can be missed.
"""

import os
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def main() -> None:
    t0 = time.time()
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    tree, cpu = {proc.pid}, {}
    while proc.poll() is None:
        stats = {int(d): s for d in os.listdir("/proc") if d.isdigit()
                 and (s := _stat(int(d))) is not None}
        grew = True
        while grew:
            new = {pid for pid, (parent, _) in stats.items() if parent in tree} - tree
            tree |= new
            grew = bool(new)
        for pid in tree & stats.keys():
            cpu[pid] = max(cpu.get(pid, 0.0), stats[pid][1])
        time.sleep(0.1)
    print(f"wall={time.time() - t0:.1f} cpu={sum(cpu.values()):.1f} rc={proc.returncode}")


if __name__ == "__main__":
    main()

# cython: language_level=3
"""The OpenMP thread count of the calling thread, which the kernels' parallel loops use."""

cimport openmp


def get_num_threads():
    """Threads a parallel kernel called from this thread runs on."""
    return openmp.omp_get_max_threads()


def set_num_threads(int n):
    """Set the threads of parallel kernels called from this thread (others keep theirs)."""
    if n < 1:
        raise ValueError(f"thread count must be at least 1, got {n}")
    openmp.omp_set_num_threads(n)

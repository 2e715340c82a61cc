"""Builds the compiled kernels (Cython, OpenMP) at install time: `pip install .` and
`pip install -e .` run this; everything else about the package is in pyproject.toml."""

import os

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

# -fwrapv: integer arithmetic wraps as numpy's int64 does (the hashes and key differences
# rely on it); -fopenmp: the kernels' prange loops run on all cores.
FLAGS = ["-O3", "-fwrapv", "-fopenmp", "-Wno-unused-function"]
KERNELS = os.path.join("pipeline", "kernels")


def extension(name: str) -> Extension:
    return Extension(name, [name.replace(".", os.sep) + ".pyx"],
                     include_dirs=[KERNELS, np.get_include()],
                     define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                     extra_compile_args=FLAGS, extra_link_args=["-fopenmp"])


MODULES = ["pipeline.kernels._tabulation", "pipeline.kernels._lookups",
           "pipeline.kernels._sorting", "pipeline.kernels._text",
           "pipeline.kernels._csv_walk", "pipeline.kernels._threads",
           "pipeline.classic._classic"]

# Cython's translations and gcc's compilations on every core the build may use, one module
# each (the modules are independent of each other)
JOBS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

setup(ext_modules=cythonize([extension(m) for m in MODULES if os.path.exists(
    m.replace(".", os.sep) + ".pyx")], include_path=[KERNELS], language_level=3,
    nthreads=JOBS,
    compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True,
                         "initializedcheck": False}),
    options={"build_ext": {"parallel": JOBS}})

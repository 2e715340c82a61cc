"""Finding a run's input files, and knowing they did not change while it read them.

- `discovery`: `resolve_inputs` turns what a user named (a file, a directory, a glob, a
  file:// URL, or a prefix or glob in an object store) into the files to read, in order: a
  name that exists is that file even with glob characters in it; snim-batch outputs, staging
  directories and Delta tables are never inputs, and what was skipped is said;
- `remote`: the objects below a prefix or matching a glob (`resolve_remote`);
- `changes`: each input described before its rows are read and asked again after
  (`describe_before_reading`, `ensure_unchanged`), so that a file rewritten meanwhile fails the run.
"""

from __future__ import annotations

from pipeline.io.lazy_exports import lazy_exports

_EXPORTS = {
    "resolve_inputs": "discovery", "resolve_remote": "remote", "DELTA_TABLE": "remote",
    "describe_before_reading": "changes", "ensure_unchanged": "changes", "change_of": "changes",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)  # each module loads when first asked for

"""The only layer that touches files and object stores; nothing here computes a verdict or
imports a layer above it (docs/ARCHITECTURE.md). Split by role, a package each:

- `store`: what a location names (a local path or a URL) and how an object store is reached:
  client options and their bounds, pyarrow file systems, one-line store errors, and the one
  redaction that keeps secrets out of every message;
- `inputs`: finding a run's input files (local paths, globs, directories, prefixes of a
  store) and checking they did not change while the run read them;
- `read`: reading them: Parquet and CSV in batches with exact row numbers, footers, CSV
  records counted from the bytes, and the rows each file holds (the run's reconciliation);
- `outputs`: where a run's tables go: the `Output` protocol and its kinds (a local directory,
  an object-store prefix, Delta tables), the manifest, write failures, `report`'s and
  `convert`'s files, and the run's scratch files.

Each package names its public entry points in `__all__`.
"""

__all__ = ["inputs", "outputs", "read", "store"]

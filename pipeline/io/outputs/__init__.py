"""Where a run's tables go, whole or not at all.

- `kinds`: the `Output` protocol (`stage`, `commit(manifest)`, `roll_back`) and its three
  kinds, chosen by `output_for`: `LocalDirectory` (`commit`: staged beside the target and
  swapped in by one rename), `ObjectStorePrefix` (`remote_commit` and `remote_target`:
  committed by a conditional PUT of the manifest), `DeltaTables` (`delta` and `delta_tables`:
  one commit per table, the runs table last);
- `manifest`: the run manifest, and whether a directory is provably a snim-batch output;
- `failures`: write failures worded once (the output, the file, the cause), names too long;
- `publish`, `publish_tables`: `report`'s page and `convert`'s tables, placed atomically and
  replaced only when provably theirs (the staging of the kinds `PageInOutput`,
  `PageElsewhere` and `TablesDirectory`, chosen for a page by `page_output_for`);
- `scratch`: the run's scratch files (long-form input split by key), removed on every exit;
- `whole`: one file (the run result, a plot) written beside its place and renamed there.
"""

from __future__ import annotations

from pipeline.io.lazy_exports import lazy_exports

_EXPORTS = {
    "Output": "kinds", "output_for": "kinds", "LocalDirectory": "kinds",
    "ObjectStorePrefix": "kinds", "DeltaTables": "kinds", "TablesDirectory": "kinds",
    "PageInOutput": "kinds", "PageElsewhere": "kinds", "page_output_for": "kinds",
    "MANIFEST": "manifest", "read_manifest": "manifest", "write_manifest": "manifest",
    "is_snim_output": "manifest", "write_parquet": "commit", "sink_parquet": "commit",
    "WriteFailure": "failures",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)  # each module loads when first asked for

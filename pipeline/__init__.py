"""snim-batch: decide who wins S-Nim positions at data-warehouse scale.

The Python API (docs/python-api.md): `evaluate_batch(...)` runs the job and returns a
`BatchResult`; failures raise the `SnimError` subclasses named here. Each name loads its
module when first asked for, so that `import pipeline` stays cheap.
"""

from pipeline.io.lazy_exports import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "evaluate_batch": "api", "BatchResult": "api",
    **{name: "errors" for name in (
        "SnimError", "UsageError", "ConfigError", "InputError", "BadRowsError", "RuleError",
        "OutputError", "CommitOutcomeUnknown", "StoreError", "ReconcileError", "SparkFailure",
        "NotBuilt", "Stopped")},
}
__all__ = ["__version__", *_EXPORTS]
__getattr__ = lazy_exports(__name__, _EXPORTS)  # each module loads when first asked for

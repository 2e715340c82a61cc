"""snim-batch: decide who wins S-Nim positions at data-warehouse scale.

The Python API (docs/python-api.md): `evaluate_batch(...)` runs the job and returns a
`BatchResult`; failures raise the `SnimError` subclasses named here. Each name loads its
module when first asked for, so that `import pipeline` stays cheap.
"""

from typing import TYPE_CHECKING

from pipeline.io.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (at run time: `__getattr__` below)
    from pipeline.api import BatchResult as BatchResult
    from pipeline.api import evaluate_batch as evaluate_batch
    from pipeline.errors import BadRowsError as BadRowsError
    from pipeline.errors import CommitOutcomeUnknown as CommitOutcomeUnknown
    from pipeline.errors import ConfigError as ConfigError
    from pipeline.errors import InputError as InputError
    from pipeline.errors import NotBuilt as NotBuilt
    from pipeline.errors import OutputError as OutputError
    from pipeline.errors import ReconcileError as ReconcileError
    from pipeline.errors import RuleError as RuleError
    from pipeline.errors import SnimError as SnimError
    from pipeline.errors import SparkFailure as SparkFailure
    from pipeline.errors import Stopped as Stopped
    from pipeline.errors import StoreError as StoreError
    from pipeline.errors import UsageError as UsageError

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

"""Locations and object stores.

`Location.parse` reads what a user gave (a path, `file://`, `s3://`, `gs://`, `az://`,
`abfs(s)://`, `hdfs://`); `object_store` turns a location into a client: its options bound
(`with_client_options`, `storage_options`, every value checked at load by `checked_options`),
pyarrow file systems (`filesystem`), requests within those bounds, and a store's failures as
one line (`store_error`, `store_problem`). `without_secrets` is the one function through which a
location's text reaches a message, a log line or a manifest: URL passwords and query values
(signed URLs) read `<hidden>`. `RunCache` holds, for one run, what it would otherwise ask a
store (or a file) for again: footers, objects' metadata, small objects whole.
"""

from __future__ import annotations

from pipeline.io.lazy_exports import lazy_exports

_EXPORTS = {
    "Location": "locations", "without_secrets": "locations", "STORES": "locations",
    "with_client_options": "object_store", "checked_options": "object_store",
    "filesystem": "object_store",
    "object_metadata": "object_store", "redacted": "object_store",
    "storage_options": "object_store", "store_error": "object_store",
    "StoreError": "object_store", "RunCache": "run_cache",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)  # each module loads when first asked for

"""Object stores (S3, GCS, Azure): the options every client of a run gets, pyarrow file systems
built from them, object metadata, and store errors as one line without secrets.

Credentials come from the providers' own chains (AWS_* variables, profiles and instance roles;
GOOGLE_APPLICATION_CREDENTIALS; AZURE_* variables and managed identities), overridden by the
`storage_options:` mapping of config.yaml (object_store's names, as polars and deltalake take
them). Every client gets bounded timeouts and retries (CLIENT_DEFAULTS, overridable there), so
an endpoint that never answers fails the run instead of hanging it."""

from __future__ import annotations

import math
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import timedelta
from functools import lru_cache
from typing import Any

from pipeline.errors import ConfigError, InputError, SnimError, StoreError, UsageError, truncated
from pipeline.io.store.locations import Location, without_secrets
from pipeline.io.store.run_cache import RunCache

CLIENT_DEFAULTS = {"connect_timeout": "5s", "timeout": "30s", "max_retries": "2",
                   "retry_timeout": "30s"}
"""Bounds for every request: 5 s to connect, 30 s for a request, 2 retries within 30 s."""


_SHOWN_KEYS = ("endpoint", "region", "allow_http", "timeout", "retries", "retry",
               "account_name", "use_emulator", "virtual_hosted", "skip_signature", "bucket")
"""Option names whose values are no secret (a manifest records them; others are hidden)."""


_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
               "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
               "AZURE_CLIENT_SECRET", "GOOGLE_SERVICE_ACCOUNT_KEY")


MAX_SECONDS = 3600
"""The longest duration an option may give (a request, a connection, all retries)."""


MAX_RETRIES = 100


_DURATIONS = ("timeout", "connect_timeout", "retry_timeout", "pool_idle_timeout",
              "http2_keep_alive_interval", "http2_keep_alive_timeout")
"""Options that are durations (object_store's client options, and polars' retry_timeout)."""


_FLAGS = ("allow_http", "aws_allow_http", "allow_invalid_certificates",
          "skip_signature", "aws_skip_signature", "google_skip_signature",
          "azure_skip_signature", "virtual_hosted_style_request",
          "aws_virtual_hosted_style_request", "use_emulator", "azure_storage_use_emulator",
          "http1_only", "http2_only", "http2_keep_alive_while_idle", "unsigned_payload",
          "aws_unsigned_payload", "imdsv1_fallback", "aws_imdsv1_fallback",
          "use_fabric_endpoint", "azure_use_fabric_endpoint")
"""Options that are true or false."""


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


_ENDPOINTS = ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint",
              "azure_endpoint", "azure_storage_endpoint", "gcs_base_url", "google_base_url")
"""Options that are the URL of a store's server (a proxy's may carry its credentials)."""


_SIGNED_QUERY = re.compile(r"((?:sig|X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|"
                           r"Signature|se|sv|sp)=)[^&\s\"']+", re.IGNORECASE)


def storage_options(location: Location, configured: Mapping[str, str] | None = None
                    ) -> dict[str, str]:
    """The object_store options for `location` (polars, deltalake): CLIENT_DEFAULTS, then
    what config.yaml's `storage_options:` sets; for S3 an http:// endpoint (from there or
    AWS_ENDPOINT_URL) is allowed, and for Azure the account an abfs URL names is used.
    Empty for a local location."""
    if not location.is_remote:
        return {}
    options = {**CLIENT_DEFAULTS, **(configured or {})}
    lowered = {key.lower(): value for key, value in options.items()}
    if location.scheme == "s3":
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
            if os.environ.get(name):
                endpoint_problem(os.environ[name], name)
        s3_key_pair(lowered)  # half a pair with the other half nowhere: the config's error
    if location.scheme == "s3" and (s3_endpoint(lowered) or "").startswith("http://"):
        options.setdefault("aws_allow_http", "true")
    if location.scheme == "az" and location.account and not azure_account(lowered):
        options["account_name"] = location.account
    return options


def with_client_options(location: Location, configured: Mapping[str, str] | None = None
                        ) -> Location:
    """`location` with its client options (`storage_options`) attached."""
    options = tuple(sorted(storage_options(location, configured).items()))
    return replace(location, options=options)


def polars_options(location: Location) -> dict[str, Any]:
    """A bound location's options as polars takes them (max_retries an integer)."""
    options: dict[str, Any] = dict(location.options)
    if "max_retries" in options:
        options["max_retries"] = int(options["max_retries"])
    return options


def shown_options(configured: Mapping[str, str]) -> dict[str, str]:
    """`configured` for the manifest: values of names that may hold secrets are hidden."""
    return {key: without_secrets(value) if any(part in key.lower() for part in _SHOWN_KEYS)
            else "<hidden>" for key, value in configured.items()}


def redacted(text: str, configured: Mapping[str, str] | None = None) -> str:
    """`text` without any secret it may quote: values of configured options that are not
    shown in the manifest, secret environment variables, and URLs' passwords and query
    values (`without_secrets`)."""
    text = without_secrets(text)
    secrets = [value for key, value in (configured or {}).items()
               if shown_options({key: value})[key] == "<hidden>"]
    secrets += [os.environ[name] for name in _SECRET_ENV if os.environ.get(name)]
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "<hidden>")
    return _SIGNED_QUERY.sub(r"\1<hidden>", text)


_UNITS = {"ms": 0.001, "msec": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
          "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600}
_PART = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)\s*([a-z]+)")


def seconds(text: str, name: str) -> float:
    """A duration option in seconds: a number and a unit ("30s", "500ms", "2m", "1h"), or
    several ("1m 30s"), as object_store reads them; more than 0 and at most MAX_SECONDS."""
    value = str(text).strip().lower()
    parts = _PART.findall(value)
    if (not parts or _PART.sub("", value).strip()
            or any(unit not in _UNITS for _, unit in parts)):
        raise ConfigError(f"storage_options.{name}: not a duration ({truncated(str(text))}); "
                          "write it as 30s, 500ms or 2m")
    total = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if not 0.001 <= total <= MAX_SECONDS:
        raise ConfigError(f"storage_options.{name}: must be between 1ms and "
                          f"{MAX_SECONDS // 3600}h, got {truncated(str(text))}")
    return total


def retries(text: str, name: str = "max_retries") -> int:
    """The max_retries option: an integer from 0 to MAX_RETRIES."""
    value = str(text).strip()
    if not re.fullmatch(r"\d{1,4}", value) or int(value) > MAX_RETRIES:
        raise ConfigError(f"storage_options.{name}: must be an integer from 0 to "
                          f"{MAX_RETRIES}, got {truncated(str(text))}")
    return int(value)


def retry_seconds(lowered: Mapping[str, str]) -> float:
    """How long a request's retries may take (`lowered`: options with lower-case names):
    retry_timeout, or nothing once max_retries is 0: a user who asks for no retries is not
    kept waiting for them."""
    if not retries(lowered.get("max_retries", CLIENT_DEFAULTS["max_retries"])):
        return 0.0
    return seconds(lowered.get("retry_timeout", CLIENT_DEFAULTS["retry_timeout"]),
                   "retry_timeout")


def endpoint_problem(url: str, name: str) -> None:
    """ConfigError unless `url` is a server's http(s):// URL (host, optional port and path;
    no user name or password, which the clients would take for a host, and no query)."""
    from urllib.parse import urlsplit

    said = f"{name}: {truncated(without_secrets(url))}"
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ConfigError(f"{said} is not a valid URL (a port from 1 to 65535?)") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{said} is not an http:// or https:// URL of a server")
    if "@" in parts.netloc:
        raise ConfigError(f"{said}: an endpoint URL holds no user name or password (give "
                          "the store's credentials as their own options, such as "
                          "aws_access_key_id and aws_secret_access_key)")
    if parts.query or parts.fragment or port == 0:
        raise ConfigError(f"{said}: an endpoint URL takes no query, fragment or port 0")


def checked_options(configured: Mapping[str, str], source: str = "storage_options"
                    ) -> dict[str, str]:
    """config.yaml's `storage_options`, every value checked whether or not the run uses a
    store (durations, max_retries, true/false flags, endpoint URLs); flags as "true" or
    "false". ConfigError naming the key otherwise."""
    checked = {}
    for key, value in configured.items():
        name, low = f"{source}.{key}", key.lower()
        if low in _DURATIONS:
            seconds(value, key)
        elif low == "max_retries":
            value = str(retries(value, key))
        elif low in _FLAGS:
            flag = str(value).strip().lower()
            if flag not in _TRUE + _FALSE:
                raise ConfigError(f"{name}: must be true or false, got {truncated(str(value))}")
            value = "true" if flag in _TRUE else "false"
        elif low in _ENDPOINTS:
            endpoint_problem(value, name)
        checked[key] = value
    return checked


def _first(options: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        if options.get(name):
            return options[name]
    return None


def s3_key_pair(lowered: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(access key id, secret access key) from storage_options, one half taken from the
    environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) when the options give only the
    other, as polars' reader takes it; (None, None) leaves both to the provider chain."""
    key = _first(lowered, "aws_access_key_id", "access_key_id")
    secret = _first(lowered, "aws_secret_access_key", "secret_access_key")
    if (key is None) == (secret is None):
        return key, secret
    key = key or os.environ.get("AWS_ACCESS_KEY_ID") or None
    secret = secret or os.environ.get("AWS_SECRET_ACCESS_KEY") or None
    if key is None or secret is None:
        given, missing = (("aws_access_key_id", "aws_secret_access_key") if secret is None
                          else ("aws_secret_access_key", "aws_access_key_id"))
        raise ConfigError(f"storage_options.{given} is given without {missing} (in "
                          f"storage_options or {missing.upper()} in the environment): give "
                          "both, or neither for the provider chain")
    return key, secret


def s3_endpoint(lowered: Mapping[str, str]) -> str | None:
    return (_first(lowered, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
            or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))


def azure_account(lowered: Mapping[str, str]) -> str | None:
    return (_first(lowered, "azure_storage_account_name", "account_name")
            or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
            or os.environ.get("AZURE_STORAGE_ACCOUNT"))


_CLIENT_ENV = ("AWS_", "AZURE_", "GOOGLE_", "GCS_")


_HADOOP: list[Callable[[Location], Any]] = []
"""The pyarrow file system for an hdfs:// location, while an engine that reaches Hadoop's
file systems provides one (`through_hadoop`)."""


@contextmanager
def through_hadoop(filesystems: Callable[[Location], Any]) -> Iterator[None]:
    """hdfs:// locations reachable through `filesystems` for the duration (the Spark engine,
    over its session's JVM, while it finds and reads hdfs:// positions)."""
    _HADOOP.append(filesystems)
    try:
        yield
    finally:
        _HADOOP.remove(filesystems)


def hdfs_refused(location: Location) -> UsageError:
    return UsageError(f"{location}: hdfs:// is read only by the Spark engine, and only for "
                      "positions (--engine spark, not Spark Connect); put the other inputs and "
                      "--out on a local or shared path or an object store")


def filesystem(location: Location) -> Any:
    """The pyarrow file system for `location` (its options bound by `Location.options`),
    built once per store, options and provider environment variables."""
    if location.scheme == "hdfs" and _HADOOP:
        return _HADOOP[-1](location)
    if location.scheme not in ("s3", "gs", "az"):
        raise hdfs_refused(location)
    environment = tuple(sorted((k, v) for k, v in os.environ.items()
                               if k.startswith(_CLIENT_ENV)))
    return _filesystem(location.scheme, location.account, location.options, environment)


@lru_cache(maxsize=16)
def _filesystem(scheme: str, account: str, options: tuple[tuple[str, str], ...],
                environment: tuple[tuple[str, str], ...]) -> Any:
    from pyarrow import fs

    merged = dict(options)
    lowered = {key.lower(): value for key, value in merged.items()}
    timeout = seconds(lowered["timeout"], "timeout")
    connect = seconds(lowered["connect_timeout"], "connect_timeout")
    attempts = retries(lowered["max_retries"]) + 1
    retrying = retry_seconds(lowered)
    if scheme == "s3":
        endpoint = s3_endpoint(lowered)
        access_key, secret_key = s3_key_pair(lowered)
        return fs.S3FileSystem(
            access_key=access_key, secret_key=secret_key,
            session_token=_first(lowered, "aws_session_token", "session_token", "token"),
            region=_first(lowered, "aws_region", "region", "aws_default_region")
            or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
            endpoint_override=endpoint,
            anonymous=_first(lowered, "aws_skip_signature", "skip_signature") == "true",
            force_virtual_addressing=_first(
                lowered, "aws_virtual_hosted_style_request",
                "virtual_hosted_style_request") == "true",
            connect_timeout=connect, request_timeout=timeout,
            retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=attempts))
    if scheme == "gs":
        # pyarrow's GCS client takes one bound: the time it retries a request for (in whole
        # seconds), which is what retry_timeout promises; at least 1 s, as with a window of
        # 0 its retry loop would end before the first attempt
        base = _first(lowered, "gcs_base_url", "google_base_url", "endpoint")
        where = _server(base) if base else {}
        return fs.GcsFileSystem(
            anonymous=_first(lowered, "google_skip_signature", "skip_signature") == "true",
            retry_time_limit=timedelta(seconds=max(1, math.ceil(retrying))),
            scheme=where.get("scheme"), endpoint_override=where.get("authority"))
    if scheme == "az":
        name = account or azure_account(lowered)
        if not name:
            raise ConfigError("az:// needs a storage account: name it in the URL "
                              "(abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH), in "
                              "storage_options (account_name) or in AZURE_STORAGE_ACCOUNT_NAME")
        key = _first(lowered, "azure_storage_account_key", "account_key",
                     "access_key") or os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
        sas = _first(lowered, "azure_storage_sas_key", "sas_key", "sas_token") \
            or os.environ.get("AZURE_STORAGE_SAS_TOKEN")
        secret = _first(lowered, "azure_client_secret", "client_secret")
        base = _first(lowered, "azure_endpoint", "azure_storage_endpoint", "endpoint")
        if not base and _first(lowered, "azure_storage_use_emulator", "use_emulator") == "true":
            base = "http://127.0.0.1:10000"
        where = _server(base) if base else {}
        with nullcontext() if key or sas or secret else _default_azure_credential():
            return fs.AzureFileSystem(
                name, account_key=key, sas_token=sas,
                client_id=_first(lowered, "azure_client_id", "client_id"),
                client_secret=secret,
                tenant_id=_first(lowered, "azure_tenant_id", "tenant_id"),
                blob_storage_authority=where.get("authority"),
                dfs_storage_authority=where.get("authority"),
                blob_storage_scheme=where.get("scheme"), dfs_storage_scheme=where.get("scheme"))
    raise AssertionError(scheme)  # filesystem() refused it


def _server(url: str) -> dict[str, str]:
    """The scheme and host[:port] of an endpoint URL, as pyarrow's GCS and Azure clients
    take them."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    return {"scheme": parts.scheme.lower(), "authority": parts.netloc}


_AZURE_CHAINS = ("dev", "prod", "environmentcredential", "workloadidentitycredential",
                 "managedidentitycredential", "azureclicredential")


@contextmanager
def _default_azure_credential() -> Iterator[None]:
    """While pyarrow's Azure client builds DefaultAzureCredential: a value of
    AZURE_TOKEN_CREDENTIALS that it would abort the process on is a ConfigError, and
    without the az command on PATH the chain leaves out the Azure CLI credential (which
    could only fail, printing the shell's "az: not found" on our stderr). The variable is
    set for that construction only: a caller's later Azure SDK use finds it as it was."""
    chain = os.environ.get("AZURE_TOKEN_CREDENTIALS")
    if chain is not None and chain.strip().lower() not in _AZURE_CHAINS:
        raise ConfigError(f"AZURE_TOKEN_CREDENTIALS: {truncated(chain)} is not one of dev, prod, "
                          "EnvironmentCredential, WorkloadIdentityCredential, "
                          "ManagedIdentityCredential, AzureCliCredential")
    if chain is not None or shutil.which("az") is not None:
        yield
        return
    os.environ["AZURE_TOKEN_CREDENTIALS"] = "prod"
    try:
        yield
    finally:
        os.environ.pop("AZURE_TOKEN_CREDENTIALS", None)


def store_failures() -> tuple[type[BaseException], ...]:
    """What a pyarrow file system raises for a store's failure (an ArrowException that is
    neither an OSError nor a ValueError among them, as for Azure's credentials)."""
    from pyarrow.lib import ArrowException

    return (OSError, ValueError, ArrowException)


_AZURE_CREDENTIALS = (
    "no usable Azure credentials were found: give storage_options account_key or "
    "sas_token (or AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN), a service "
    "principal (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CLIENT_SECRET), or run where a "
    "managed identity or `az login` provides them")


def client_url(location: Location) -> str:
    """The URL polars' object_store client reads for `location` (s3a:// as s3://)."""
    if location.scheme == "s3":
        return f"s3://{location.store_path}"
    if location.scheme == "gs":
        return f"gs://{location.store_path}"
    return location.url if location.account else f"az://{location.store_path}"


def store_error(location: Location, exc: BaseException, doing: str = "reading") -> SnimError:
    """`exc` from a store client as one line naming `location`: missing object or bucket,
    unreachable endpoint, timeout, refused credentials, or the client's first line (secrets
    removed)."""
    if isinstance(exc, SnimError):
        return exc
    problem = store_problem(location, exc, doing)
    if problem is not None:
        return problem
    text = redacted(" ".join(str(exc).split()), dict(location.options))
    return StoreError(f"{location}: object store error while {doing} ({truncated(text, 200)})")


def store_problem(location: Location, exc: BaseException, doing: str = "reading"
                  ) -> SnimError | None:
    """The store-level failure `exc` reports (see `store_error`), or None when it is about
    something else (a file's content)."""
    text = redacted(" ".join(str(exc).split()), dict(location.options))
    low = text.lower()
    words = low.replace("_", "")  # pyarrow's INVALID_ACCESS_KEY_ID, NO_SUCH_BUCKET
    if "nosuchbucket" in words or "bucket does not exist" in low or "containernotfound" in low:
        return InputError(f"{location}: the bucket {location.bucket!r} does not exist")
    if "defaultazurecredential" in words or "get token from" in low:
        return StoreError(f"{location}: {_AZURE_CREDENTIALS}")
    if "oauth2 access token" in low:
        return StoreError(f"{location}: no usable Google credentials were found: set "
                          "GOOGLE_APPLICATION_CREDENTIALS to a service account key file, run "
                          "where the metadata server provides them, or set storage_options "
                          "google_skip_signature: true for a public bucket")
    if "magic bytes" in low:  # "Parquet magic bytes not found": the content, not the store
        return None
    if isinstance(exc, FileNotFoundError) or "nosuchkey" in low or "not found" in low \
            or "path does not exist" in low:
        return InputError(f"{location}: no such object")
    endpoint = _endpoint_shown(location)
    limits = dict(location.options)
    if "timed out" in low or "timeout" in low or "curlcode: 28" in low:
        return StoreError(f"{location}: the object store{endpoint} did not answer while "
                          f"{doing} (timeout {limits.get('timeout', '?')}, "
                          f"{limits.get('max_retries', '?')} retries)")
    if ("connection refused" in low or "could not connect" in low or "curlcode: 7" in low
            or "connect error" in low):
        return StoreError(f"{location}: cannot connect to the object store{endpoint} "
                          f"while {doing} (connection refused)")
    host = re.search(r"could not resolve host: ([^\s;,()']+)", low)
    if host is not None or any(words_ in low for words_ in (
            "could not resolve", "failed to lookup address", "dns error",
            "name or service not known", "temporary failure in name resolution")):
        name = host.group(1).strip(".") if host is not None and host.group(1) else ""
        if name and not _unresolvable(name):  # the name resolves here: not a DNS failure
            return StoreError(f"{location}: cannot reach the object store{endpoint} while "
                              f"{doing} ({truncated(text, 200)})")
        named = f" {name!r}" if name else ""
        return StoreError(f"{location}: cannot resolve the object store's host{named}"
                          f"{endpoint} while {doing}")
    if any(word in words for word in ("accessdenied", "access denied",
                                      "forbidden", "403", "invalidaccesskeyid",
                                      "signaturedoesnotmatch", "credential", "token request",
                                      "authoriz", "account must")):
        return StoreError(f"{location}: the object store refused access while {doing} "
                          "(check the credentials)")
    if "object-store error" in low or "aws error" in low or "google::cloud" in low \
            or "azure error" in low:
        return StoreError(f"{location}: object store error while {doing} ({truncated(text, 200)})")
    return None


def _unresolvable(host: str) -> bool:
    """Whether `host` does not resolve here (a store's "could not resolve host" then means
    what it says)."""
    import socket

    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return True
    return False


def _endpoint_shown(location: Location) -> str:
    lowered = {k.lower(): v for k, v in location.options}
    endpoint = s3_endpoint(lowered) if location.scheme == "s3" else _first(
        lowered, "gcs_base_url", "google_base_url", "azure_endpoint", "azure_storage_endpoint",
        "endpoint")
    return f" at {redacted(endpoint)}" if endpoint else ""


def answered(location: Location, request: Callable[[], Any], doing: str = "reading") -> Any:
    """request() to the store of `location`; for gs:// and az:// within the bound its
    options promise (connect_timeout + timeout + `retry_seconds`), else a StoreError:
    pyarrow's GCS and Azure clients take no request timeout, and wait minutes on an endpoint
    that accepts connections and never answers. The request then goes on in a daemon thread,
    which the process does not wait for."""
    if location.scheme not in ("gs", "az"):
        return request()
    limits = {**CLIENT_DEFAULTS, **{k.lower(): v for k, v in location.options}}
    bound_s = sum(seconds(limits[name], name)
                  for name in ("connect_timeout", "timeout")) + retry_seconds(limits)
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, request()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="store-request", daemon=True).start()
    if not done.wait(bound_s):
        raise StoreError(f"{location}: the object store{_endpoint_shown(location)} did not "
                         f"answer while {doing} (timeout {limits['timeout']}, "
                         f"{limits['max_retries']} retries)")
    ok, value = outcome[0]
    if ok:
        return value
    raise value


def object_metadata(location: Location, *, cache: RunCache | None = None) -> dict[str, Any]:
    """size, and the store's etag and version (None where it has none) of one object: with
    the run's `cache`, as the run's first request for the object found them; without, as the
    store has them now."""
    found = None if cache is None else cache.get("metadata", location)
    if found is not None:
        return found
    try:
        with answered(location, lambda: filesystem(location).open_input_file(
                location.store_path)) as handle:
            return _described(location, handle, cache)
    except store_failures() as exc:
        raise _read_error(location, exc) from None


def _read_error(location: Location, exc: BaseException) -> SnimError:
    """`store_error` for a read of one object; a missing object that is a prefix (as a
    directory marker, a key ending in "/", is listed) is named so."""
    problem = store_error(location, exc)
    if str(problem).endswith(": no such object") and location.key:
        from pyarrow import fs

        try:
            marker = filesystem(location).get_file_info(
                location.store_path).type == fs.FileType.Directory
        except store_failures():
            marker = False
        if marker:
            return InputError(f"{location}/: a prefix or directory marker (a key ending in "
                              "'/'), not an object to read; remove the marker, or name the "
                              "objects to read")
    return problem


def _described(location: Location, handle: Any, cache: RunCache | None) -> dict[str, Any]:
    """`object_metadata` from an opened object (pyarrow asked the store once, a HEAD), kept
    in the run's `cache` if given."""
    meta = {key.lower(): value for key, value in (handle.metadata() or {}).items()}

    def text(*names: str) -> str | None:
        for name in names:
            if meta.get(name):
                value = meta[name]
                return (value.decode(errors="replace") if isinstance(value, bytes)
                        else str(value)).strip('"')
        return None

    described = {"size": handle.size(), "etag": text("etag"),
                 "version": text("versionid", "generation")}
    if cache is not None and cache.get("metadata", location) is None:  # as first found
        cache.put("metadata", location, described, 256)
    return described


def read_head(location: Location, count: int, whole: Callable[[int], bool] | None = None,
              *, cache: RunCache | None = None) -> tuple[bytes, int]:
    """The first `count` bytes of an object (all of it if `whole` says so of its size), and
    its size (its metadata kept in the run's `cache`, if given)."""
    try:
        with answered(location, lambda: filesystem(location).open_input_file(
                location.store_path)) as handle:
            size = _described(location, handle, cache)["size"]
            return handle.read(size if whole and whole(size) else count), size
    except store_failures() as exc:
        raise _read_error(location, exc) from None


def open_stream(location: Location) -> Any:
    """A sequential pyarrow input stream over one object."""
    try:
        return answered(location, lambda: filesystem(location).open_input_stream(
            location.store_path, compression=None))  # its bytes, whatever its name says
    except store_failures() as exc:
        raise _read_error(location, exc) from None


def open_random(location: Location, *, cache: RunCache | None = None) -> Any:
    """A random-access pyarrow input file over one object (Parquet footers); its metadata
    kept in the run's `cache`, if given."""
    try:
        handle = answered(location, lambda: filesystem(location).open_input_file(
            location.store_path))
        _described(location, handle, cache)
        return handle
    except store_failures() as exc:
        raise _read_error(location, exc) from None


def list_below(location: Location) -> list[tuple[str, int, float]]:
    """(key, size, modification time in seconds since the epoch) of every object below
    `location` (as a prefix "key/"), sorted."""
    from pyarrow import fs

    try:
        found = answered(location, lambda: filesystem(location).get_file_info(fs.FileSelector(
            location.store_path, recursive=True, allow_not_found=True)), "listing")
    except store_failures() as exc:
        raise store_error(location, exc, "listing") from None
    start = len(location.bucket) + 1
    return sorted((info.path[start:], info.size or 0,
                   info.mtime.timestamp() if info.mtime is not None else 0.0)
                  for info in found if info.type == fs.FileType.File)


def is_object(location: Location) -> bool:
    """Whether `location` names an object (not a prefix, not nothing)."""
    from pyarrow import fs

    if not location.key:
        return False
    try:
        found = answered(location, lambda: filesystem(location).get_file_info(
            location.store_path), "looking it up")
        return found.type == fs.FileType.File
    except store_failures() as exc:
        raise store_error(location, exc, "looking it up") from None


def bucket_exists(location: Location) -> bool:
    """Whether the bucket (or container) of `location` exists."""
    from pyarrow import fs

    try:
        found = answered(location, lambda: filesystem(location).get_file_info(
            location.bucket), "looking up its bucket")
        return found.type != fs.FileType.NotFound
    except store_failures() as exc:
        raise store_error(location, exc, "looking up its bucket") from None

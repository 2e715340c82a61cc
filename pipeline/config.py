"""config.yaml -> a frozen, typed `Config`; every error names the key at fault.

Relative paths in a config file are resolved against the file's own directory, so a job behaves
the same whatever directory it is started from. CLI flags override keys via `Config.override`.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote

from pipeline.errors import ConfigError, brief_repr, truncated
from pipeline.io.store.locations import Location, directories_glob, without_secrets
from pipeline.io.store.object_store import checked_options, shown_options
from pipeline.limits import (
    DEFAULT_PROBE_OPS,
    DEFAULT_RULE_OPS,
    DEFAULT_RUN_OPS,
    DEFAULT_TABLE_LEN,
    DEFAULT_TOTAL_VALUES,
    MAX_TABLE_LEN,
)

ENGINES = ("polars", "spark")
FORMATS = ("parquet", "delta")
POLICIES = ("reject", "fail")


@dataclass(frozen=True)
class Columns:
    """Input column names, configurable for tables that name them differently."""

    rule_set_id: str = "rule_set_id"
    kind: str = "kind"
    moves: str = "moves"
    position_id: str = "position_id"
    heaps: str = "heaps"
    heap: str = "heap"


@dataclass(frozen=True)
class Tables:
    """SG table limits: `max_table_len` caps any table and `max_total_values` all of a run's
    tables together (memory: 1 byte a value for |S| < 255); `max_rule_ops` caps the work of
    any table and `max_run_ops` all tables' together (operations: values x (|S| + 200),
    about a nanosecond each); `period_probe_ops` is the work spent
    past the data's largest heaps proving periods to report in sg_tables."""

    max_table_len: int = DEFAULT_TABLE_LEN
    max_total_values: int = DEFAULT_TOTAL_VALUES
    max_rule_ops: int = DEFAULT_RULE_OPS
    max_run_ops: int = DEFAULT_RUN_OPS
    period_probe_ops: int = DEFAULT_PROBE_OPS


@dataclass(frozen=True)
class Spark:
    """`master` for a session snim-batch starts itself (spark-submit's --master wins when run
    under it); `conf` is passed to the session builder (spark.driver.memory, ...); `remote`,
    a Spark Connect URL (sc://HOST:PORT), runs the job on that server instead ("": none)."""

    master: str = "local[*]"
    conf: dict[str, str] = field(default_factory=dict)
    remote: str = ""


@dataclass(frozen=True)
class Output:
    """`format`: `parquet` (one directory per run, replaced atomically) or `delta` (--out is a
    root of Delta tables that every run adds its night to)."""

    format: str = "parquet"


@dataclass(frozen=True)
class Config:
    """A run's settings. `out` is a local Path, or the URL of an object-store output (a
    str); `storage_options` configures object-store clients (`io.object_store`);
    `config_file` the file they were read from (absolute; None: none was read), which the
    manifest names beside them (not in `as_dict`)."""

    rules: str
    positions: str
    out: Path | str
    engine: str = "polars"
    winning_moves: bool = False
    on_bad_rows: str = "reject"
    max_rejected_rows: int | None = None
    """Rejected rows (rules and positions) a run may have and still succeed (exit 0);
    None: no tolerance unless `max_rejected_rate` gives one (`reject_tolerance`)."""
    max_rejected_rate: float | None = None
    """The same as a fraction (0..1) of the input rows read (rules and positions)."""
    overwrite: bool = False
    columns: Columns = field(default_factory=Columns)
    tables: Tables = field(default_factory=Tables)
    spark: Spark = field(default_factory=Spark)
    output: Output = field(default_factory=Output)
    storage_options: dict[str, str] = field(default_factory=dict)
    memory_limit: int | Literal["auto"] = "auto"
    """Bytes the polars engine's verdicts may use before sorted runs go to scratch (see
    `memory_bytes`); "auto": derived from the memory available (`polars_engine.memory_limit`)."""
    config_file: Path | None = None

    def override(self, **changes: Any) -> Config:
        """A copy with the given (non-None) values replaced, validated like the file's."""
        changes = {k: v for k, v in changes.items() if v is not None}
        new = dataclasses.replace(self, **changes)
        _check_choices(new, "option")
        return new

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, recorded in the run manifest."""
        d = dataclasses.asdict(self)
        del d["config_file"]
        d["out"] = str(self.out)
        d["storage_options"] = shown_options(self.storage_options)
        d["spark"]["remote"] = hidden_remote(self.spark.remote)  # sc://h/;token=...
        d["spark"]["master"] = hidden_master(self.spark.master)  # spark://u:PW@h:7077
        d["spark"]["conf"] = {key: "<hidden>" if _SECRET_NAME.search(key)
                              else without_secrets(value)
                              for key, value in self.spark.conf.items()}
        return d


_SECRET_NAME = re.compile(r"secret|passw|token|credential|signature|(^|[._-])sas|"
                          r"key($|[._-])", re.IGNORECASE)
"""Spark settings whose values the manifest hides (fs.s3a.secret.key, ...account.key...)."""


_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]*"
                   r"[A-Za-z0-9])?)*\.?|\[[0-9A-Fa-f:.]+\]")
_CONNECT_URL = re.compile(r"sc://(?P<host>[^/:;?#@\[\]]*|\[[^\]]*\])(?::(?P<port>[^/;@?#]*))?"
                          r"(?P<path>/[^;?#]*)?(?:;(?P<params>[^/?#]*))?")
_METADATA_KEY = re.compile(r"[a-z0-9_.-]+")  # a gRPC metadata key: other parameters are sent so
_CONNECT_BOOLS = ("use_ssl", "grpc_keepalive_enabled", "grpc_keepalive_without_calls")
_CONNECT_MILLIS = ("grpc_keepalive_time_ms", "grpc_keepalive_timeout_ms")
MAX_USER_AGENT = 2048  # the Spark Connect client's own limit, in URL-escaped characters
_LOCAL_MASTER = re.compile(r"local(\[\s*([0-9]+|\*)\s*(,\s*[0-9]+\s*)?\])?|local-cluster\[\s*"
                           r"[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*\]")
_OTHER_MASTER = re.compile(r"yarn|k8s://\S+|[a-z][a-z0-9+.-]*://\S+")  # and cluster managers'


def _port_problem(port: str) -> str | None:
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        return f"the port must be a number from 1 to 65535, got {brief_repr(truncated(port, 20))}"
    return None


def hidden_remote(url: str) -> str:
    """An sc:// URL for a message: a user or password in it and its parameters' values (a
    token) hidden."""
    hidden = re.sub(r"^([a-z]*://)[^/;@]*@", r"\1<hidden>@", without_secrets(url))
    return re.sub(r";([^;=]*)(=[^;]*)?", lambda m: f";{m.group(1)}=<hidden>"
                  if m.group(2) is not None else ";<hidden>", hidden)


def hidden_master(url: str) -> str:
    """A Spark master URL for a message or the manifest: everything from its schemes to its
    last `@` hidden (`spark://u:PW@h:7077` as `spark://<hidden>@h:7077`, `k8s://https://u:PW@h`
    as `k8s://https://<hidden>@h`), as a password may hold `/`, `,` or `@`."""
    at = url.rfind("@")
    if at < 0:
        return url
    schemes = re.match(r"(?:[A-Za-z][A-Za-z0-9+.-]*://)*", url)
    start = schemes.end() if schemes else 0
    return url[:start] + "<hidden>" + url[at:]


def remote_problem(url: str) -> str | None:
    """What is wrong with a Spark Connect URL, sc://HOST[:PORT][/;KEY=VALUE;...] (None: it
    is right), checked as the client will read it, so that a bad one is a usage error before
    anything starts, not the client's failure later."""
    if not url.startswith("sc://"):
        return "it must start with sc://"
    found = _CONNECT_URL.fullmatch(url)
    if found is None:
        if "@" in url.split(";")[0]:
            return ("a user or password is not part of a Spark Connect URL (give token=... "
                    "as a parameter)")
        if re.search(r"[?#]", url):
            return "it has no query (?) or fragment (#)"
        return "it is not of the form sc://HOST[:PORT][/;KEY=VALUE;...]"
    host, port, path, params = found.group("host", "port", "path", "params")
    if not host:
        return "the host is missing"
    if not _HOST.fullmatch(host) or len(host) > 253:
        return f"the host {brief_repr(truncated(host, 40))} is not a host name or an IP address"
    if port is not None and (problem := _port_problem(port)):
        return problem
    if path not in (None, "/"):
        return "a Spark Connect URL has no path (parameters follow /;)"
    if params is None:
        return None
    if path is None:
        return "parameters follow /; after the host and port"
    seen: set[str] = set()
    for part in params.split(";"):
        key, equals, value = part.partition("=")
        if not key:
            return "a parameter is empty or has no name (;;, or ;=)"
        if not equals:  # not echoed: it may be a token given without its name
            return "a parameter must be given as KEY=VALUE"
        if "=" in value:
            return (f"the parameter {brief_repr(truncated(key, 40))} must be given as "
                    "KEY=VALUE, with one =")
        if not _METADATA_KEY.fullmatch(key):
            return (f"the parameter name {brief_repr(truncated(key, 40))} must be lowercase "
                    "letters, digits, _, . or -")
        if key in seen:
            return f"the parameter {key!r} is given twice"
        seen.add(key)
        value = unquote(value)
        if not value.isprintable() or not value.isascii():
            return f"the parameter {key!r} must be printable ASCII text (URL-escaped)"
        if key in _CONNECT_BOOLS and value.lower() not in ("true", "false"):
            return f"the parameter {key!r} must be true or false"
        if key in _CONNECT_MILLIS and not (value.isdigit() and 1 <= int(value) <= 2**31 - 1):
            return f"the parameter {key!r} must be milliseconds from 1 to {2**31 - 1}"
        if key == "session_id" and not _uuid4(value):
            return "the parameter 'session_id' must be a UUID (version 4)"
        if key == "user_agent" and len(quote(value)) > MAX_USER_AGENT:
            return (f"the parameter 'user_agent' must be at most {MAX_USER_AGENT} characters "
                    "once URL-escaped")
    return None


def _uuid4(text: str) -> bool:
    try:
        return uuid.UUID(text).version == 4
    except ValueError:
        return False


def master_problem(master: str) -> str | None:
    """What is wrong with a Spark master URL (None: nothing Spark's own parser refuses
    before starting): local, local[N], local[*], local[N,F], local-cluster[N,C,M],
    spark://HOST:PORT[,HOST:PORT...], yarn, k8s://..., or a cluster manager's SCHEME://..."""
    if master != master.strip() or not master:
        return "it is empty or has spaces around it"
    if master.startswith("local"):
        found = _LOCAL_MASTER.fullmatch(master)
        if found is None:
            return "a local master is local, local[N], local[*], local[N,F] or local-cluster[N,C,M]"
        if found.group(2) is not None and found.group(2) != "*" and int(found.group(2)) < 1:
            return "a local master needs at least 1 thread"
        return None
    if master.startswith("spark://"):
        for address in master[len("spark://"):].split(","):
            host, colon, port = address.rpartition(":")
            if not colon or not host or not _HOST.fullmatch(host):
                return ("a standalone master is spark://HOST:PORT (or several HOST:PORT "
                        "separated by commas)")
            if problem := _port_problem(port):
                return problem
        return None
    if not _OTHER_MASTER.fullmatch(master):
        return ("it must be local[*], local[N], spark://HOST:PORT, yarn, k8s://... or a "
                "cluster manager's SCHEME://...")
    return None


def _check_choices(cfg: Config, where: str) -> None:
    remote = cfg.spark.remote
    if remote and (problem := remote_problem(remote)):
        raise ConfigError(f"{where} 'spark.remote' must be a Spark Connect URL "
                          f"sc://HOST[:PORT][/;KEY=VALUE;...]: {problem}; got "
                          f"{brief_repr(hidden_remote(remote))}")
    if problem := master_problem(cfg.spark.master):
        raise ConfigError(f"{where} 'spark.master' is not a Spark master URL: {problem}; got "
                          f"{brief_repr(hidden_master(cfg.spark.master))}")
    if cfg.engine not in ENGINES:
        raise ConfigError(f"{where} 'engine' must be one of {', '.join(ENGINES)}, "
                          f"got {brief_repr(cfg.engine)}")
    if cfg.on_bad_rows not in POLICIES:
        raise ConfigError(f"{where} 'on_bad_rows' must be one of {', '.join(POLICIES)}, "
                          f"got {brief_repr(cfg.on_bad_rows)}")
    for key, most in (("max_rejected_rows", None), ("max_rejected_rate", 1)):
        value = getattr(cfg, key)
        name = f"--{key.replace('_', '-')}" if where == "option" else f"{where} {key!r}"
        if value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, int if most is None
                                                      else (int, float))):
            kind = "an integer" if most is None else "a number"
            raise ConfigError(f"{name} must be {kind}, got {brief_repr(value)}")
        if not value >= 0 or (most is not None and not value <= most):  # NaN is neither
            bounds = ">= 0" if most is None else "between 0 and 1 (a fraction of the input rows)"
            raise ConfigError(f"{name} must be {bounds}, got {brief_repr(value)}")
    if cfg.output.format not in FORMATS:
        raise ConfigError(f"{where} 'output.format' must be one of {', '.join(FORMATS)}, "
                          f"got {brief_repr(cfg.output.format)}")


def _section(cls: type, raw: Any, prefix: str, source: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key '{prefix}' must be a mapping, got {brief_repr(raw)}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        name = f"{prefix}.{key}"
        if key not in known:
            raise ConfigError(f"{source}: unknown key {brief_repr(name)} (known: "
                              f"{', '.join(known)})")
        f = known[key]
        kind = dict if f.default_factory is dict else type(f.default)
        values[key] = _typed(value, kind, name, source)
    return cls(**values)


def _kind_of(value: Any) -> str:
    """What a YAML value is, without its content (which may be a secret)."""
    return {dict: "a mapping", list: "a list", str: "text", type(None): "nothing (null)"}.get(
        type(value), f"a {type(value).__name__}")


def _typed(value: Any, kind: type, name: str, source: str) -> Any:
    if kind is dict:  # storage_options, spark.conf: their values may be secrets, never shown
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: key '{name}' must be a mapping of names to values, "
                              f"got {_kind_of(value)}")
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{source}: key '{name}' must be a mapping of names to "
                                  f"values, got the name {brief_repr(k)}")
            if not isinstance(v, (str, int, float, bool)):
                raise ConfigError(f"{source}: key '{name}.{k}' must be text, a number or "
                                  f"true/false, got {_kind_of(v)}")
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: key '{name}' must be true or false, "
                              f"got {brief_repr(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: key '{name}' must be an integer, got {brief_repr(value)}")
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: key '{name}' must be a non-empty string, "
                          f"got {brief_repr(value)}")
    return value


def resolve_location(text: str, base: Path) -> str:
    """A location as given (a path relative to `base`, or a URL) -> the text the job reads;
    a glob's trailing slash is kept (`exports/*/`: its directories, as a shell's), and a
    path's or URL's (`exports/`, `exports/.`, `s3://b/exports/`: a directory or prefix, so
    that a file or object named so is refused)."""
    location = Location.parse(text, base)
    resolved = str(location)
    directory = text.endswith("/") or (not location.is_remote and text.endswith("/."))
    if (directories_glob(text) or directory) and not resolved.endswith("/"):
        resolved += "/"
    return resolved


def resolve_output(text: str, base: Path) -> Path | str:
    """An output location as given -> a local Path, or the URL of an object-store output."""
    location = Location.parse(text, base)
    return str(location) if location.is_remote else Path(str(location))


_MEMORY = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]?)(i?B)?\s*", re.IGNORECASE)
def memory_bytes(value: Any, name: str) -> int | Literal["auto"]:
    """A memory setting -> bytes: an integer of bytes, or text like 4GiB, 512MiB, 2G (powers
    of 1024); or "auto" (derived from the memory available)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    found = (_MEMORY.fullmatch(value) if isinstance(value, str)
             else None if isinstance(value, bool) or not isinstance(value, int)
             else _MEMORY.fullmatch(str(value)))
    if found is None:
        raise ConfigError(f"{name} must be auto or a size such as 4GiB or 512MiB, "
                          f"got {brief_repr(value)}")
    if not found.group(2) and not found.group(1).isdigit():
        raise ConfigError(f"{name}: a number of bytes is a whole number (or give a unit, such "
                          f"as 1.5GiB), got {brief_repr(value)}")
    size = (int(Decimal(found.group(1)) * 1024 ** ("KMGTPE".find(found.group(2).upper()) + 1))
            if found.group(2) else int(found.group(1)))  # exact: no float to overflow
    if size < 1:
        raise ConfigError(f"{name} must be at least 1 byte, got {brief_repr(value)}")
    if size >= 1 << 60:
        raise ConfigError(f"{name} must be less than 1EiB, got {brief_repr(value)}")
    return size


def load_config(path: Path, given: dict[str, str | None] | None = None) -> Config:
    """Read and validate a config file once; `given` (the command line's --rules, --positions,
    --out, relative to the working directory) fills those keys where the file has none. Every
    ConfigError names the file in its `path` (a run result's `error.path`)."""
    try:
        return _load_config(path, given)
    except ConfigError as exc:
        if exc.path is None:
            exc.path = str(path)
        raise


def _load_config(path: Path, given: dict[str, str | None] | None) -> Config:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: config file is not UTF-8 text") from None
    from pipeline.config_yaml import parse_yaml  # yaml's import only where a file is read

    raw = parse_yaml(text, source)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: must be a mapping of keys to values")
    return dataclasses.replace(config_from_dict(raw, source, path.resolve().parent, given),
                               config_file=path.resolve())


def config_from_dict(raw: dict[str, Any], source: str = "config", base: Path = Path("."),
                     given: dict[str, str | None] | None = None) -> Config:
    sections = {"columns": Columns, "tables": Tables, "spark": Spark, "output": Output}
    scalars = {"rules": str, "positions": str, "out": str, "engine": str,
               "winning_moves": bool, "on_bad_rows": str, "overwrite": bool,
               "storage_options": dict, "max_rejected_rows": "tolerance",
               "max_rejected_rate": "tolerance"}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in sections:
            values[key] = _section(sections[key], value, key, source)
        elif scalars.get(key) == "tolerance":  # checked with the choices, null: none
            values[key] = value
        elif key in scalars:
            values[key] = _typed(value, scalars[key], key, source)
        elif key == "memory_limit":
            values[key] = memory_bytes(value, f"{source}: key 'memory_limit'")
        else:
            known = ", ".join([*scalars, "memory_limit", *sections])
            raise ConfigError(f"{source}: unknown key {brief_repr(key)} (known: {known})")
    for required in ("rules", "positions", "out"):
        if required not in values and given and given.get(required):
            values[required] = resolve_location(str(given[required]), Path.cwd())
        if required not in values:
            raise ConfigError(f"{source}: missing key '{required}'")
    for key in ("engine", "on_bad_rows"):  # choices in any case, as the CLI takes them
        if key in values:
            values[key] = values[key].strip().lower()
    if "output" in values:
        values["output"] = Output(values["output"].format.strip().lower())
    for key in ("rules", "positions"):
        values[key] = resolve_location(values[key], base)
    values["out"] = resolve_output(values["out"], base)
    if "storage_options" in values:  # checked whether or not the run reaches a store
        try:
            values["storage_options"] = checked_options(values["storage_options"])
        except ConfigError as exc:
            raise ConfigError(f"{source}: key {exc}") from None
    cfg = Config(**values)
    _check_choices(cfg, f"{source}: key")
    names = dataclasses.asdict(cfg.columns)
    seen: dict[str, str] = {}
    for key, name in names.items():
        if name in seen:
            raise ConfigError(f"{source}: key 'columns.{key}' names the same input column "
                              f"{brief_repr(name)} as 'columns.{seen[name]}'")
        seen[name] = key
    t = cfg.tables
    if not 1 <= t.max_table_len <= MAX_TABLE_LEN:
        raise ConfigError(f"{source}: key 'tables.max_table_len' must be between 1 and "
                          f"{MAX_TABLE_LEN}, got {brief_repr(t.max_table_len)}")
    if t.max_total_values < 1:
        raise ConfigError(f"{source}: key 'tables.max_total_values' must be >= 1, "
                          f"got {brief_repr(t.max_total_values)}")
    for key in ("max_rule_ops", "max_run_ops"):
        if getattr(t, key) < 1:
            raise ConfigError(f"{source}: key 'tables.{key}' must be >= 1, "
                              f"got {brief_repr(getattr(t, key))}")
    if t.period_probe_ops < 0:
        raise ConfigError(f"{source}: key 'tables.period_probe_ops' must be >= 0, "
                          f"got {brief_repr(t.period_probe_ops)}")
    return cfg

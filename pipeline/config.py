"""config.yaml -> a frozen, typed `Config`; every error names the key at fault.

Relative paths in a config file are resolved against the file's own directory, so a job behaves
the same whatever directory it is started from. CLI flags override keys via `Config.override`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import ConfigError
from pipeline.grundy import (
    DEFAULT_RULE_OPS,
    DEFAULT_RUN_OPS,
    DEFAULT_TABLE_LEN,
    DEFAULT_TOTAL_VALUES,
    MAX_TABLE_LEN,
)

ENGINES = ("polars", "spark")
POLICIES = ("reject", "fail")


@dataclass(frozen=True)
class Columns:
    """Input column names (DESIGN 2), configurable for tables that name them differently."""

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
    about a nanosecond each, see grundy.PROOF_OPS); `period_probe_ops` is the work spent
    past the data's largest heaps proving periods to report in sg_tables."""

    max_table_len: int = DEFAULT_TABLE_LEN
    max_total_values: int = DEFAULT_TOTAL_VALUES
    max_rule_ops: int = DEFAULT_RULE_OPS
    max_run_ops: int = DEFAULT_RUN_OPS
    period_probe_ops: int = 200_000_000


@dataclass(frozen=True)
class Spark:
    """`master` for a session snim-batch starts itself (spark-submit's --master wins when run
    under it); `conf` is passed to the session builder (spark.driver.memory, ...)."""

    master: str = "local[*]"
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    rules: str
    positions: str
    out: Path
    engine: str = "polars"
    winning_moves: bool = False
    on_bad_rows: str = "reject"
    overwrite: bool = False
    columns: Columns = field(default_factory=Columns)
    tables: Tables = field(default_factory=Tables)
    spark: Spark = field(default_factory=Spark)

    def override(self, **changes: Any) -> Config:
        """A copy with the given (non-None) values replaced, validated like the file's."""
        changes = {k: v for k, v in changes.items() if v is not None}
        new = dataclasses.replace(self, **changes)
        _check_choices(new, "option")
        return new

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, recorded in the run manifest."""
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        return d


def _check_choices(cfg: Config, where: str) -> None:
    if cfg.engine not in ENGINES:
        raise ConfigError(f"{where} 'engine' must be one of {', '.join(ENGINES)}, "
                          f"got {cfg.engine!r}")
    if cfg.on_bad_rows not in POLICIES:
        raise ConfigError(f"{where} 'on_bad_rows' must be one of {', '.join(POLICIES)}, "
                          f"got {cfg.on_bad_rows!r}")


def _section(cls: type, raw: Any, prefix: str, source: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key '{prefix}' must be a mapping, got {raw!r}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        name = f"{prefix}.{key}"
        if key not in known:
            raise ConfigError(f"{source}: unknown key '{name}' (known: {', '.join(known)})")
        f = known[key]
        kind = dict if f.default_factory is dict else type(f.default)
        values[key] = _typed(value, kind, name, source)
    return cls(**values)


def _typed(value: Any, kind: type, name: str, source: str) -> Any:
    if kind is dict:
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, int, float, bool))
                for k, v in value.items()):
            raise ConfigError(f"{source}: key '{name}' must be a mapping of names to values, "
                              f"got {value!r}")
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: key '{name}' must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: key '{name}' must be an integer, got {value!r}")
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: key '{name}' must be a non-empty string, got {value!r}")
    return value


def _resolve(path: str, base: Path) -> str:
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else base / p)


def load_config(path: Path) -> Config:
    """Read and validate a config file once."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: config file is not UTF-8 text") from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}:{where} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: must be a mapping of keys to values")
    return config_from_dict(raw, source, path.resolve().parent)


def config_from_dict(raw: dict[str, Any], source: str = "config", base: Path = Path(".")) -> Config:
    sections = {"columns": Columns, "tables": Tables, "spark": Spark}
    scalars = {"rules": str, "positions": str, "out": str, "engine": str,
               "winning_moves": bool, "on_bad_rows": str, "overwrite": bool}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in sections:
            values[key] = _section(sections[key], value, key, source)
        elif key in scalars:
            values[key] = _typed(value, scalars[key], key, source)
        else:
            known = ", ".join([*scalars, *sections])
            raise ConfigError(f"{source}: unknown key '{key}' (known: {known})")
    for required in ("rules", "positions", "out"):
        if required not in values:
            raise ConfigError(f"{source}: missing key '{required}'")
    for key in ("rules", "positions"):
        values[key] = _resolve(values[key], base)
    values["out"] = Path(_resolve(values["out"], base))
    cfg = Config(**values)
    _check_choices(cfg, f"{source}: key")
    names = dataclasses.asdict(cfg.columns)
    seen: dict[str, str] = {}
    for key, name in names.items():
        if name in seen:
            raise ConfigError(f"{source}: key 'columns.{key}' names the same input column "
                              f"{name!r} as 'columns.{seen[name]}'")
        seen[name] = key
    t = cfg.tables
    if not 1 <= t.max_table_len <= MAX_TABLE_LEN:
        raise ConfigError(f"{source}: key 'tables.max_table_len' must be between 1 and "
                          f"{MAX_TABLE_LEN}, got {t.max_table_len}")
    if t.max_total_values < 1:
        raise ConfigError(f"{source}: key 'tables.max_total_values' must be >= 1, "
                          f"got {t.max_total_values}")
    for key in ("max_rule_ops", "max_run_ops"):
        if getattr(t, key) < 1:
            raise ConfigError(f"{source}: key 'tables.{key}' must be >= 1, "
                              f"got {getattr(t, key)}")
    if t.period_probe_ops < 0:
        raise ConfigError(f"{source}: key 'tables.period_probe_ops' must be >= 0, "
                          f"got {t.period_probe_ops}")
    return cfg

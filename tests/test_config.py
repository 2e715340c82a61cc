"""pipeline.config: config.yaml -> frozen Config; every error is a ConfigError naming the key.

The CLI maps a ConfigError to exit code 2 with one line on stderr naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import invoke

from pipeline.config import Config, Tables, config_from_dict, hidden_master, load_config
from pipeline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXE = ROOT / ".venv" / "bin" / "snim-batch"
if not EXE.exists():  # pragma: no cover - another layout of the virtualenv
    EXE = Path(sys.executable).parent / "snim-batch"

BASE = "rules: data/rules.csv\npositions: data/positions.csv\nout: results/out\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def inputs(directory: Path) -> None:
    write(directory / "data" / "rules.csv", "rule_set_id,kind,moves\n1,,2 5\n2,nim,\n")
    write(directory / "data" / "positions.csv",
          "rule_set_id,position_id,heaps\n1,0,5 12\n2,0,1 2\n")


# ---- keys and values --------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "key"), [
    ("bogus: 1\n", "bogus"),
    ("Engine: polars\n", "Engine"),
    ("columns:\n  heapz: h\n", "columns.heapz"),
    ("tables:\n  max_len: 10\n", "tables.max_len"),
    ("spark:\n  workers: 3\n", "spark.workers"),
])
def test_unknown_key(tmp_path: Path, extra: str, key: str) -> None:
    path = write(tmp_path / "config.yaml", BASE + extra)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"'{key}'" in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize(("extra", "key"), [
    ("engine: 3\n", "engine"),
    ("winning_moves: 'yes please'\n", "winning_moves"),
    ("winning_moves: 1\n", "winning_moves"),
    ("overwrite: 'true'\n", "overwrite"),
    ("on_bad_rows: [reject]\n", "on_bad_rows"),
    ("columns: heaps\n", "columns"),
    ("columns:\n  heaps: 7\n", "columns.heaps"),
    ("columns:\n  heaps: ''\n", "columns.heaps"),
    ("tables: [1, 2]\n", "tables"),
    ("tables:\n  max_table_len: big\n", "tables.max_table_len"),
    ("tables:\n  max_table_len: true\n", "tables.max_table_len"),
    ("tables:\n  max_table_len: 1.5\n", "tables.max_table_len"),
    ("tables:\n  max_table_len: 0\n", "tables.max_table_len"),
    ("tables:\n  max_table_len: 99999999999999999999\n", "tables.max_table_len"),
    ("tables:\n  period_probe_ops: -1\n", "tables.period_probe_ops"),
    ("tables:\n  period_probe_ops: '10'\n", "tables.period_probe_ops"),
    ("tables:\n  max_rule_ops: 0\n", "tables.max_rule_ops"),
    ("tables:\n  max_rule_ops: 2.5e9\n", "tables.max_rule_ops"),
    ("tables:\n  max_run_ops: -1\n", "tables.max_run_ops"),
    ("tables:\n  max_run_ops: lots\n", "tables.max_run_ops"),
    ("spark:\n  master: 5\n", "spark.master"),
    ("spark:\n  remote: 'http://h:15002'\n", "spark.remote"),
    ("spark:\n  remote: 'sc://'\n", "spark.remote"),
    ("spark:\n  remote: ''\n", "spark.remote"),
    ("spark:\n  remote: 15002\n", "spark.remote"),
])
def test_wrong_type_or_value(tmp_path: Path, extra: str, key: str) -> None:
    path = write(tmp_path / "config.yaml", BASE + extra)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"'{key}'" in str(info.value), str(info.value)


@pytest.mark.parametrize(("extra", "key", "got"), [
    ("storage_options:\n  aws_secret_access_key: [TopSecret42]\n",
     "storage_options.aws_secret_access_key", "a list"),
    ("storage_options:\n  aws_session_token: {v: TopSecret42}\n",
     "storage_options.aws_session_token", "a mapping"),
    ("storage_options: aws_secret_access_key=TopSecret42\n", "storage_options", "text"),
    ("spark:\n  conf:\n    spark.hadoop.fs.s3a.secret.key: [TopSecret42]\n",
     "spark.conf.spark.hadoop.fs.s3a.secret.key", "a list"),
])
def test_a_wrong_value_in_storage_options_or_spark_conf_is_named_not_shown(
        tmp_path: Path, extra: str, key: str, got: str) -> None:
    """Their values may be secrets: a value of the wrong type is named by its key and its
    kind, never echoed (before, the whole mapping was, secret and all, on stderr and in the
    run's result)."""
    path = write(tmp_path / "config.yaml", BASE + extra)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"key '{key}' must be " in str(info.value), str(info.value)
    assert str(info.value).endswith(f", got {got}")
    assert "TopSecret42" not in str(info.value)


LONGEST = "9" * 100  # the longest integer a config may hold (MAX_INT_CHARS)


@pytest.mark.parametrize(("key", "value"), [
    ("max_table_len", LONGEST), ("max_table_len", "-" + LONGEST[1:]),
    ("max_total_values", "-" + LONGEST[1:]), ("max_rule_ops", "-" + LONGEST[1:]),
    ("max_run_ops", "-" + LONGEST[1:]), ("period_probe_ops", "-" + LONGEST[1:]),
    ("max_table_len", "0b" + "1" * 98), ("max_run_ops", "-0x" + "f" * 97),
    ("max_run_ops", "-1" + ":59" * 32),  # YAML 1.1 base 60: a 58-digit integer
])
def test_an_integer_out_of_range_is_echoed_cut(tmp_path: Path, key: str, value: str) -> None:
    """The longest integer a config may hold, out of a key's range: the message names the key
    and shows the value in at most 60 characters, never in full."""
    path = write(tmp_path / "c.yaml", BASE + f"tables:\n  {key}: {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    number = message.rpartition("got ")[2]
    assert message.startswith(f"{path}: key 'tables.{key}' must be "), message
    full = yaml_int(value)
    assert len(number) <= 60, message
    if number != str(full):
        assert number in (f"<a {full.bit_length()}-bit integer>",
                          f"{str(full)[:18]}...{str(full)[-19:]}"), message


def yaml_int(text: str) -> int:
    """An integer as YAML 1.1 reads it (sign, 0b, 0x, base 60), written here independently."""
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("-")
    if digits.startswith("0b"):
        return sign * int(digits[2:], 2)
    if digits.startswith("0x"):
        return sign * int(digits[2:], 16)
    value = 0
    for part in digits.split(":"):
        value = value * 60 + int(part)
    return sign * value


@pytest.mark.parametrize(("key", "text"), [
    ("rules", "rules: 5\npositions: p.csv\nout: o\n"),
    ("positions", "rules: r.csv\npositions: ~\nout: o\n"),
    ("out", "rules: r.csv\npositions: p.csv\nout: []\n"),
    ("out", "rules: r.csv\npositions: p.csv\nout: ''\n"),
])
def test_paths_must_be_non_empty_strings(tmp_path: Path, key: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "c.yaml", text))
    assert f"'{key}'" in str(info.value)


@pytest.mark.parametrize("missing", ["rules", "positions", "out"])
def test_missing_required_key(tmp_path: Path, missing: str) -> None:
    text = "".join(line + "\n" for line in BASE.splitlines() if not line.startswith(missing))
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "c.yaml", text))
    assert f"'{missing}'" in str(info.value)


@pytest.mark.parametrize(("key", "value"), [("engine", "flink"), ("engine", "Polars-x"),
                                            ("on_bad_rows", "skip"), ("on_bad_rows", "")])
def test_bad_choice(tmp_path: Path, key: str, value: str) -> None:
    path = write(tmp_path / "config.yaml", BASE + f"{key}: '{value}'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert f"'{key}'" in message, message


@pytest.mark.parametrize(("key", "value", "taken"), [("engine", "Polars", "polars"),
                                                     ("engine", " SPARK ", "spark"),
                                                     ("on_bad_rows", "Fail", "fail")])
def test_choices_in_any_case_as_the_cli_takes_them(tmp_path: Path, key: str, value: str,
                                                   taken: str) -> None:
    cfg = load_config(write(tmp_path / "config.yaml", BASE + f"{key}: '{value}'\n"))
    assert getattr(cfg, key) == taken


@pytest.mark.parametrize(("key", "value"), [("engine", "flink"), ("on_bad_rows", "skip")])
def test_bad_choice_in_override(key: str, value: str) -> None:
    cfg = config_from_dict({"rules": "r", "positions": "p", "out": "o"}, "cfg", Path("/x"))
    with pytest.raises(ConfigError) as info:
        cfg.override(**{key: value})
    assert f"'{key}'" in str(info.value)


@pytest.mark.parametrize("text", ["rules: [unclosed\n", "- a\n- b\n", "just text\n",
                                  "rules: r\n\trules: x\n"])
def test_not_a_mapping_or_not_yaml(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_work_limits_have_documented_defaults_and_are_configurable(tmp_path: Path) -> None:
    """tables.max_rule_ops and tables.max_run_ops: 2 * 10^9 and 10^10 operations unless set
    (docs/configuration.md), any integer >= 1 when set, and recorded in the manifest's config."""
    assert (Tables().max_rule_ops, Tables().max_run_ops) == (2_000_000_000, 10_000_000_000)
    cfg = load_config(write(tmp_path / "c.yaml", BASE + (
        "tables:\n  max_rule_ops: 1\n  max_run_ops: 123456789012345\n")))
    assert (cfg.tables.max_rule_ops, cfg.tables.max_run_ops) == (1, 123456789012345)
    assert cfg.as_dict()["tables"]["max_run_ops"] == 123456789012345


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_full_config_typed_and_frozen(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", BASE + (
        "engine: polars\nwinning_moves: true\non_bad_rows: fail\noverwrite: true\n"
        "columns:\n  heaps: H\n  rule_set_id: rid\n"
        "tables:\n  max_table_len: 1000\n  period_probe_ops: 0\n"
        "spark:\n  master: 'local[2]'\n"))
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    assert (cfg.engine, cfg.winning_moves, cfg.on_bad_rows, cfg.overwrite) == (
        "polars", True, "fail", True)
    assert (cfg.columns.heaps, cfg.columns.rule_set_id, cfg.columns.heap) == ("H", "rid", "heap")
    assert (cfg.tables.max_table_len, cfg.tables.period_probe_ops) == (1000, 0)
    assert cfg.spark.master == "local[2]"
    with pytest.raises(AttributeError):
        cfg.engine = "spark"  # type: ignore[misc]
    json.dumps(cfg.as_dict())


# ---- relative paths ---------------------------------------------------------------------------


def test_relative_paths_resolve_against_config_dir(tmp_path: Path, monkeypatch: Any) -> None:
    config_dir = tmp_path / "project" / "conf"
    path = write(config_dir / "job.yaml",
                 "rules: ../data/rules.csv\npositions: 'data/p*.parquet'\nout: out\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(Path(os.path.relpath(path, elsewhere)))
    assert Path(cfg.rules).resolve() == (tmp_path / "project" / "data" / "rules.csv").resolve()
    assert Path(cfg.rules).is_absolute() and Path(cfg.positions).is_absolute()
    assert Path(cfg.positions) == config_dir.resolve() / "data" / "p*.parquet"
    assert cfg.out == config_dir.resolve() / "out"


def test_absolute_paths_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", f"rules: {tmp_path}/r.csv\npositions: /abs/p.csv\n"
                                      "out: /abs/out\n")
    cfg = load_config(path)
    assert (cfg.rules, cfg.positions, cfg.out) == (f"{tmp_path}/r.csv", "/abs/p.csv",
                                                   Path("/abs/out"))


def test_cli_job_from_another_directory_uses_config_dir(tmp_path: Path) -> None:
    project = tmp_path / "project"
    inputs(project)
    config = write(project / "job.yaml", BASE + "winning_moves: true\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, err = invoke(["run", "--config", os.path.relpath(config, elsewhere)], elsewhere)
    assert code == 0, err
    manifest = json.loads((project / "results" / "out" / "manifest.json").read_text())
    assert manifest["config"]["rules"] == str(project.resolve() / "data" / "rules.csv")
    assert list(elsewhere.iterdir()) == []


def test_cli_flags_override_config_and_resolve_against_cwd(tmp_path: Path) -> None:
    project = tmp_path / "project"
    inputs(project)
    config = write(project / "job.yaml", BASE + "on_bad_rows: fail\n")
    code, err = invoke(["run", "--config", str(config), "--out", "here",
                        "--on-bad-rows", "reject"], tmp_path)
    assert code == 0, err
    manifest = json.loads((tmp_path / "here" / "manifest.json").read_text())
    assert manifest["config"]["on_bad_rows"] == "reject"
    assert manifest["config"]["out"] == str(tmp_path / "here")


# ---- the CLI: exit 2, one line naming the file and the key ------------------------------------


@pytest.mark.parametrize(("extra", "key"), [
    ("bogus: 1\n", "bogus"),
    ("engine: flink\n", "engine"),
    ("on_bad_rows: skip\n", "on_bad_rows"),
    ("winning_moves: maybe\n", "winning_moves"),
    ("tables:\n  max_table_len: big\n", "tables.max_table_len"),
    ("columns:\n  heapz: h\n", "columns.heapz"),
])
def test_cli_bad_config_exit_2(tmp_path: Path, extra: str, key: str) -> None:
    inputs(tmp_path)
    config = write(tmp_path / "job.yaml", BASE + extra)
    code, err = invoke(["run", "--config", str(config)], tmp_path)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and f"'{key}'" in lines[0], err
    assert not (tmp_path / "results").exists()


def test_cli_bad_config_exit_2_real_process(tmp_path: Path) -> None:
    inputs(tmp_path)
    config = write(tmp_path / "job.yaml", BASE + "on_bad_rows: skip\n")
    proc = subprocess.run([str(EXE), "run", "--config", str(config)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "'on_bad_rows'" in proc.stderr


@pytest.mark.parametrize("text", ["rules: [unclosed\n", "- a\n", ""])
def test_cli_unparseable_or_empty_config_exit_2(tmp_path: Path, text: str) -> None:
    config = write(tmp_path / "job.yaml", text)
    code, err = invoke(["run", "--config", str(config)], tmp_path)
    assert code == 2 and str(config) in err and err.strip().count("\n") == 0, err


def test_cli_missing_config_exit_2(tmp_path: Path) -> None:
    code, err = invoke(["run", "--config", str(tmp_path / "nope.yaml")], tmp_path)
    assert code == 2 and "nope.yaml" in err


def test_cli_bad_flag_value_exit_2(tmp_path: Path) -> None:
    inputs(tmp_path)
    config = write(tmp_path / "job.yaml", BASE)
    for flag, value in (("--engine", "flink"), ("--on-bad-rows", "skip")):
        code, _ = invoke(["run", "--config", str(config), flag, value], tmp_path)
        assert code == 2


def test_spark_engine_unavailable_exit_2(tmp_path: Path) -> None:
    """`engine: spark` without the spark extra: a usage error, one line, exit 2. pyspark is
    hidden from a child interpreter (sys.modules entry None makes its import fail)."""
    inputs(tmp_path)
    config = write(tmp_path / "job.yaml", BASE + "engine: spark\n")
    hide = ("import sys; sys.modules['pyspark'] = None; sys.argv[1:] = sys.argv[2:]; "
            "from pipeline.cli import app; app()")
    proc = subprocess.run([sys.executable, "-c", hide, "--", "run", "--config", str(config)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    said, err = proc.stderr.split("\n", 1)  # which config the run read, then the error
    assert said == f"snim-batch: config: {config}", proc.stderr
    assert "pip install '.[spark]' in the project's checkout" in err, err
    assert err.strip().count("\n") == 0, err
    assert not (tmp_path / "results" / "out").exists()


def test_cli_config_not_utf8_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_bytes(b"rules: r\xe9sum\xe9.csv\npositions: p.csv\nout: o\n")
    code, err = invoke(["run", "--config", str(config)], tmp_path)
    assert code == 2, err
    assert str(config) in err and "internal error" not in err


def test_columns_mapped_to_the_same_name_is_a_config_error(tmp_path: Path) -> None:
    inputs(tmp_path)
    config = write(tmp_path / "job.yaml", BASE + "columns:\n  heaps: rule_set_id\n")
    code, err = invoke(["run", "--config", str(config)], tmp_path)
    assert code == 2, err
    assert "columns.heaps" in err and str(config) in err


# ---- YAML a config file has no use for: alias bombs, duplicate keys, huge values -----------

LAUGHS = '["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'


def alias_bomb(levels: int, key: str = "engine") -> str:
    """A billion-laughs document: each level is 9 aliases of the one before (9^levels)."""
    lines = [f"a0: &a0 {LAUGHS}"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append(f"{key}: [" + ", ".join([f"*a{levels - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [3, 9])
def test_alias_bomb_refused_naming_the_line(tmp_path: Path, levels: int) -> None:
    # 9^10 values at 9 levels: refused before anything is expanded (at the first alias that
    # goes past the limit: level 3, 9 x 91 values, is on line 4 of the document)
    path = write(tmp_path / "c.yaml", alias_bomb(levels))
    assert path.stat().st_size < 900
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: line 4: YAML aliases expand to more than 1000 "
                               "values; a config file needs no more")


def test_alias_bomb_refused_by_the_cli_with_exit_2(tmp_path: Path) -> None:
    config = write(tmp_path / "job.yaml", BASE + alias_bomb(9, "spark"))
    code, err = invoke(["run", "--config", str(config)], tmp_path)
    assert code == 2, err
    assert err == (f"snim-batch: error: {config}: line 7: YAML aliases expand to more than "
                   "1000 values; a config file needs no more\n")


def test_aliases_up_to_the_limit_are_read(tmp_path: Path) -> None:
    # 10 aliases of a 99-item list (100 values each) add exactly 1000 values: read, then
    # refused as a value of the wrong type, echoed in 60 characters at most.
    items = ", ".join(["x"] * 99)
    path = write(tmp_path / "c.yaml", BASE + f"tables: [&l [{items}], "
                 + ", ".join(["*l"] * 10) + "]\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: key 'tables' must be a mapping, got "
                               "[['x', 'x', 'x', 'x', 'x', 'x', ...], ['x', 'x', 'x', 'x'...")
    path.write_text(path.read_text().replace("*l]", "*l, *l]"))
    with pytest.raises(ConfigError, match="line 4: YAML aliases expand to more than 1000"):
        load_config(path)


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "rules: &in data/in.csv\npositions: *in\nout: o\n"
                 "spark:\n  conf: {spark.app.note: *in}\n")
    cfg = load_config(path)
    assert cfg.positions == cfg.rules == str(tmp_path.resolve() / "data" / "in.csv")
    assert cfg.spark.conf == {"spark.app.note": "data/in.csv"}


@pytest.mark.parametrize(("text", "message"), [
    ("engine: &e [1, *e]\n", "line 4: alias 'e' is inside the value it names (a recursive "
                             "value)"),
    ("tables:\n  max_table_len: " + "7" * 5000 + "\n", "line 5: an integer of 5000 characters"),
    ("engine: " + "[" * 3000 + "]" * 3000 + "\n", "values are nested too deeply"),
    ("engine: *nowhere\n", "line 4 is not valid YAML (found undefined alias 'nowhere')"),
    ("engine: polars\x00\n", "line 4 is not valid YAML (the control character U+0000 is not "
                             "allowed in a YAML file)"),
    ("winning_moves: true\nengine: polars\x7f\n", "line 5 is not valid YAML (the control "
                                                  "character U+007F is not allowed in a YAML "
                                                  "file)"),
    ("engine: 'a\x9bb'\n", "line 4 is not valid YAML (the control character U+009B is not "
                           "allowed in a YAML file)"),
])
def test_yaml_refused_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "c.yaml", BASE + text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: {message}"


@pytest.mark.parametrize(("text", "message"), [
    ("engine: polars\nwinning_moves: true\nengine: polars\n",
     "key 'engine' is given twice (lines 4 and 6)"),
    ("columns:\n  heaps: h\n  heap: g\n  heaps: k\n",
     "key 'columns.heaps' is given twice (lines 5 and 7)"),
    ("columns: {heaps: h, heaps: h}\n", "key 'columns.heaps' is given twice (lines 4 and 4)"),
    ("tables:\n  max_table_len: 10\ncolumns:\n  heap: g\ntables:\n  period_probe_ops: 0\n",
     "key 'tables' is given twice (lines 4 and 8)"),
    ("spark:\n  conf:\n    spark.driver.memory: 1g\n    spark.driver.memory: 8g\n",
     "key 'spark.conf.spark.driver.memory' is given twice (lines 6 and 7)"),
    ("'rules': again\n", "key 'rules' is given twice (lines 1 and 4)"),
])
def test_duplicate_keys_name_the_key_and_both_lines(tmp_path: Path, text: str,
                                                    message: str) -> None:
    path = write(tmp_path / "c.yaml", BASE + text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: {message}"


def test_cli_duplicate_key_exit_2(tmp_path: Path) -> None:
    inputs(tmp_path)
    config = write(tmp_path / "job.yaml", BASE + "engine: polars\nengine: spark\n")
    code, err = invoke(["run", "--config", str(config)], tmp_path)
    assert (code, err) == (2, f"snim-batch: error: {config}: key 'engine' is given twice "
                              "(lines 4 and 5)\n")
    assert not (tmp_path / "results").exists()


LONG = "z" * 5000


@pytest.mark.parametrize("extra", [
    f"engine: {LONG}\n", f"on_bad_rows: {LONG}\n", f"winning_moves: {LONG}\n",
    f"overwrite: [{LONG}]\n", f"spark:\n  master: [{LONG}]\n", f"columns: {LONG}\n",
    f"columns:\n  heaps: [{LONG}]\n",
    f"tables:\n  max_table_len: {LONG}\n", f"spark:\n  conf: {LONG}\n", f"? {LONG}\n: 1\n",
    f"columns:\n  ? {LONG}\n  : h\n", f"columns:\n  heaps: {LONG}\n  heap: {LONG}\n",
])
def test_no_message_echoes_a_value_in_full(tmp_path: Path, extra: str) -> None:
    path = write(tmp_path / "c.yaml", BASE + extra)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert LONG not in message and len(message) < len(str(path)) + 260, message
    if "conf" not in extra:  # spark.conf's values may be secrets: not shown at all (above)
        assert "zzz..." in message, message


def test_spark_remote_from_the_file_and_the_command_line(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path / "c.yaml", BASE + "spark:\n  remote: sc://h:15002\n"))
    assert cfg.spark.remote == "sc://h:15002"
    assert config_from_dict({"rules": "r", "positions": "p", "out": "o"}).spark.remote == ""
    with pytest.raises(ConfigError) as info:
        cfg.override(spark=dataclasses.replace(cfg.spark, remote="h:15002"))
    assert str(info.value) == ("option 'spark.remote' must be a Spark Connect URL "
                               "sc://HOST[:PORT][/;KEY=VALUE;...]: it must start with sc://; "
                               "got 'h:15002'")


def test_a_spark_master_given_alone_overrides_the_files_spark_remote(tmp_path: Path) -> None:
    """--spark-master (or SNIM_BATCH_SPARK_MASTER) with a config file that names a Spark
    Connect server: the run goes to that master (the server was used, the flag ignored); a
    remote given alone or with a master keeps the remote, and nothing given keeps the
    file's."""
    from pipeline.api import settings

    config = write(tmp_path / "c.yaml", BASE + "spark:\n  remote: sc://h:15002\n")
    given = {(None, None): ("local[*]", "sc://h:15002"),
             ("spark://m:7077", None): ("spark://m:7077", ""),
             (None, "sc://o:1"): ("local[*]", "sc://o:1"),
             ("spark://m:7077", "sc://o:1"): ("spark://m:7077", "sc://o:1")}
    for (master, remote), want in given.items():
        cfg = settings(config_file=config, spark_master=master, spark_remote=remote)
        assert (cfg.spark.master, cfg.spark.remote) == want, (master, remote)


@pytest.mark.parametrize("url", [
    "sc://h", "sc://h:15002", "sc://h:1/", "sc://h:65535", "sc://127.0.0.1:15002",
    "sc://[::1]:15002", "sc://spark-1.example.com/;token=abc;use_ssl=true",
    "sc://h/;grpc_keepalive_time_ms=30000;user_id=ann;x-trace=1",
    "sc://h/;session_id=2f1c1a1e-8f7b-4c55-9d43-1b9f0c7e2a10",
])
def test_spark_connect_urls_the_client_takes(url: str) -> None:
    cfg = config_from_dict({"rules": "r", "positions": "p", "out": "o", "spark": {"remote": url}})
    assert cfg.spark.remote == url


@pytest.mark.parametrize(("url", "problem", "echoed"), [
    ("sc://127.0.0.1:99999", "the port must be a number from 1 to 65535, got '99999'",
     "'sc://127.0.0.1:99999'"),
    ("sc://h:0", "the port must be a number from 1 to 65535, got '0'", "'sc://h:0'"),
    ("sc://h:", "the port must be a number from 1 to 65535, got ''", "'sc://h:'"),
    ("sc://h:9" + "9" * 30, "the port must be a number from 1 to 65535, got '99999999999999999...'",
     None),
    ("sc://h:port", "the port must be a number from 1 to 65535, got 'port'", "'sc://h:port'"),
    ("sc://:15002", "the host is missing", "'sc://:15002'"),
    ("sc://", "the host is missing", "'sc://'"),
    ("sc://ex ample", "the host 'ex ample' is not a host name or an IP address", None),
    ("sc://h:1/x", "a Spark Connect URL has no path (parameters follow /;)", None),
    ("sc://h;token=T", "parameters follow /; after the host and port", "'sc://h;token=<hidden>'"),
    ("sc://h/;SECRET", "a parameter must be given as KEY=VALUE", "'sc://h/;<hidden>'"),
    ("sc://h/;token=a=b", "the parameter 'token' must be given as KEY=VALUE, with one =",
     "'sc://h/;token=<hidden>'"),
    ("sc://h/;;", "a parameter is empty or has no name (;;, or ;=)", None),
    ("sc://h/;use_ssl=yes", "the parameter 'use_ssl' must be true or false", None),
    ("sc://h/;grpc_keepalive_time_ms=x",
     "the parameter 'grpc_keepalive_time_ms' must be milliseconds from 1 to 2147483647", None),
    ("sc://h/;session_id=zz", "the parameter 'session_id' must be a UUID (version 4)", None),
    ("sc://h/;Token=T", "the parameter name 'Token' must be lowercase letters, digits, _, . or -",
     "'sc://h/;Token=<hidden>'"),
    ("sc://h/;token=S1;token=S2", "the parameter 'token' is given twice",
     "'sc://h/;token=<hidden>;token=<hidden>'"),
    ("sc://h/;user_agent=" + "a" * 2049,
     "the parameter 'user_agent' must be at most 2048 characters once URL-escaped", None),
    ("sc://admin:PW@h:15002", "a user or password is not part of a Spark Connect URL (give "
     "token=... as a parameter)", "'sc://<hidden>@h:15002'"),
    ("sc://h:1?x=1", "it has no query (?) or fragment (#)", None),
    ("http://h:15002", "it must start with sc://", None),
])
def test_a_bad_spark_connect_url_is_named_without_its_secrets(tmp_path: Path, url: str,
                                                             problem: str, echoed) -> None:
    """Checked as the client reads it, before anything starts: the port in 1..65535 (the
    client's own ValueError was an internal error), a host, no path, KEY=VALUE parameters with
    the client's known ones typed; a password or a token is never echoed."""
    path = write(tmp_path / "c.yaml", BASE + f"spark:\n  remote: '{url}'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: key 'spark.remote' must be a Spark Connect URL "
                              f"sc://HOST[:PORT][/;KEY=VALUE;...]: {problem}; got "), message
    if echoed is not None:
        assert message.endswith(f"; got {echoed}"), message
    for secret in ("PW", "S1", "S2", "=T", "SECRET", "a=b"):
        assert secret not in message.split("; got ")[1], message


def test_a_spark_connect_token_is_not_recorded() -> None:
    cfg = config_from_dict({"rules": "r", "positions": "p", "out": "o", "spark": {
        "remote": "sc://h:443/;token=SECRET;use_ssl=true"}})
    assert cfg.spark.remote == "sc://h:443/;token=SECRET;use_ssl=true"
    assert cfg.as_dict()["spark"]["remote"] == "sc://h:443/;token=<hidden>;use_ssl=<hidden>"


@pytest.mark.parametrize(("master", "shown"), [
    ("spark://admin:SECRET@h:7077", "spark://<hidden>@h:7077"),
    ("spark://a:SECRET@h1:7077,b:SECRET@h2:7077", "spark://<hidden>@h2:7077"),
    ("k8s://https://u:SECRET@h:443", "k8s://https://<hidden>@h:443"),
    ("k8s://https://u:SE/CR,ET@h:443", "k8s://https://<hidden>@h:443"),  # / and , in it
    ("spark://admin:p/SECRET@h:7077", "spark://<hidden>@h:7077"),
    ("mesos://zk://u:SECRET@h:2181/mesos", "mesos://zk://<hidden>@h:2181/mesos"),
    ("local[2]", "local[2]"),
])
def test_a_spark_masters_user_and_password_are_not_shown(master: str, shown: str) -> None:
    """A refused master is echoed, an accepted one recorded in the manifest: neither with a
    password in it (it was echoed as given, where a Spark Connect URL's never was)."""
    assert hidden_master(master) == shown
    cfg = config_from_dict({"rules": "r", "positions": "p", "out": "o"})
    try:
        recorded = cfg.override(spark=dataclasses.replace(cfg.spark, master=master)).as_dict()
    except ConfigError as refused:
        assert str(refused).endswith(f"; got {shown!r}"), refused
    else:
        assert recorded["spark"]["master"] == shown


@pytest.mark.parametrize("master", [
    "local", "local[*]", "local[4]", "local[2,3]", "local[*, 4]", "local-cluster[2,1,1024]",
    "spark://127.0.0.1:7077", "spark://h1:7077,h2:7078", "yarn", "k8s://https://h:6443",
])
def test_spark_master_urls_spark_takes(master: str) -> None:
    cfg = config_from_dict({"rules": "r", "positions": "p", "out": "o"})
    assert cfg.override(spark=dataclasses.replace(cfg.spark, master=master)).spark.master == master


@pytest.mark.parametrize(("master", "problem"), [
    ("local[0]", "a local master needs at least 1 thread"),
    ("local[abc]", "a local master is local, local[N], local[*], local[N,F] or "
                   "local-cluster[N,C,M]"),
    ("spark://", "a standalone master is spark://HOST:PORT (or several HOST:PORT separated by "
                 "commas)"),
    ("spark://h", "a standalone master is spark://HOST:PORT (or several HOST:PORT separated by "
                  "commas)"),
    ("spark://127.0.0.1:99999", "the port must be a number from 1 to 65535, got '99999'"),
    ("spark://h:7077,g:0", "the port must be a number from 1 to 65535, got '0'"),
    ("foo", "it must be local[*], local[N], spark://HOST:PORT, yarn, k8s://... or a cluster "
            "manager's SCHEME://..."),
    (" ", "it is empty or has spaces around it"),
    ("local[*] ", "it is empty or has spaces around it"),
])
def test_a_bad_spark_master_is_a_config_error(master: str, problem: str) -> None:
    cfg = config_from_dict({"rules": "r", "positions": "p", "out": "o"})
    with pytest.raises(ConfigError) as info:
        cfg.override(spark=dataclasses.replace(cfg.spark, master=master))
    assert str(info.value) == (f"option 'spark.master' is not a Spark master URL: {problem}; "
                               f"got {master!r}")


def test_override_echoes_a_value_shortened() -> None:
    cfg = config_from_dict({"rules": "r", "positions": "p", "out": "o"}, "cfg", Path("/x"))
    with pytest.raises(ConfigError) as info:
        cfg.override(engine="q" * 1000)
    assert str(info.value) == ("option 'engine' must be one of polars, spark, got "
                               f"'{'q' * 27}...{'q' * 28}'")


@pytest.mark.parametrize(("line", "said"), [
    ('max_retries: "99999999999999999999"', "max_retries: must be an integer from 0 to 100"),
    ("max_retries: 99999999999999999999", "max_retries: must be an integer from 0 to 100"),
    ("max_retries: -1", "max_retries: must be an integer from 0 to 100"),
    ("max_retries: 101", "max_retries: must be an integer from 0 to 100"),
    ("max_retries: 2.5", "max_retries: must be an integer from 0 to 100"),
    ('timeout: "0s"', "timeout: must be between 1ms and 1h"),
    ("timeout: 0ms", "timeout: must be between 1ms and 1h"),
    ("connect_timeout: 2h", "connect_timeout: must be between 1ms and 1h"),
    ("retry_timeout: 100000000h", "retry_timeout: must be between 1ms and 1h"),
    ("timeout: forever", "timeout: not a duration (forever)"),
    ("timeout: 30", "timeout: not a duration (30)"),  # object_store refuses a bare number
    ("timeout: -5s", "timeout: not a duration (-5s)"),
    ("timeout: 5 parsecs", "timeout: not a duration (5 parsecs)"),
    ("pool_idle_timeout: soon", "pool_idle_timeout: not a duration"),
    ("aws_allow_http: maybe", "aws_allow_http: must be true or false"),
    ("aws_skip_signature: 2", "aws_skip_signature: must be true or false"),
    ('aws_endpoint_url: "http://admin:PWSECRET@127.0.0.1:9000"',
     "aws_endpoint_url: http://admin:<hidden>@127.0.0.1:9000: an endpoint URL holds no user name"),
    ('aws_endpoint_url: "http://h:99999"', "is not a valid URL"),
    ('endpoint: "minio:9000"', "is not an http:// or https:// URL of a server"),
    ('gcs_base_url: "http://h:1/?sig=SSECRET"', "takes no query"),
])
def test_storage_options_are_checked_at_load_with_no_store_in_use(
        tmp_path: Path, line: str, said: str) -> None:
    """Every value is checked when the config is read, even by a run that reaches no store
    (which would otherwise pass them by, exit 0), and the error names the key; a secret in
    a value is not shown."""
    inputs(tmp_path)
    config = write(tmp_path / "config.yaml", BASE + f"storage_options:\n  {line}\n")
    with pytest.raises(ConfigError, match="key storage_options.") as caught:
        load_config(config)
    assert said in str(caught.value)
    assert "SECRET" not in str(caught.value)
    code, err = invoke(["run", "--config", config, "--verbose"], tmp_path)
    assert code == 2 and said in err and "SECRET" not in err, err
    assert not (tmp_path / "results").exists()


def test_valid_storage_options_are_kept_with_flags_as_true_or_false(tmp_path: Path) -> None:
    inputs(tmp_path)
    config = write(tmp_path / "config.yaml", BASE + (
        "storage_options:\n  timeout: 1m 30s\n  connect_timeout: 500ms\n  max_retries: 0\n"
        "  retry_timeout: 1h\n  aws_allow_http: yes\n  aws_skip_signature: 'OFF'\n"
        "  aws_endpoint_url: http://127.0.0.1:9000\n  aws_region: eu-west-1\n"))
    assert load_config(config).storage_options == {
        "timeout": "1m 30s", "connect_timeout": "500ms", "max_retries": "0",
        "retry_timeout": "1h", "aws_allow_http": "true", "aws_skip_signature": "false",
        "aws_endpoint_url": "http://127.0.0.1:9000", "aws_region": "eu-west-1"}
    code, err = invoke(["run", "--config", config], tmp_path)
    assert code == 0, err


def test_the_manifest_shows_no_secret_of_the_config(tmp_path: Path) -> None:
    """storage_options secrets, an endpoint's or a proxy's password, a Spark Connect token
    and Spark settings that hold keys: none reaches the manifest a run writes."""
    inputs(tmp_path)
    config = write(tmp_path / "config.yaml", BASE + (
        "storage_options:\n  aws_secret_access_key: SECRET1\n"
        "  proxy_url: http://u:SECRET2@proxy:3128\n  aws_region: eu-west-1\n"
        "spark:\n  conf:\n    spark.hadoop.fs.s3a.secret.key: SECRET3\n"
        "    spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net: SECRET4\n"
        "    spark.hadoop.fs.s3a.endpoint: http://u:SECRET5@h:9000\n"
        "    spark.driver.memory: 2g\n"))
    code, err = invoke(["run", "--config", config, "--verbose"], tmp_path)
    assert code == 0, err
    text = (tmp_path / "results" / "out" / "manifest.json").read_text()
    assert "SECRET" not in text and "SECRET" not in err
    recorded = json.loads(text)["config"]
    assert recorded["storage_options"]["aws_region"] == "eu-west-1"
    assert recorded["spark"]["conf"]["spark.driver.memory"] == "2g"
    assert recorded["spark"]["conf"]["spark.hadoop.fs.s3a.endpoint"] == \
        "http://u:<hidden>@h:9000"
    cfg = load_config(config).override(spark=dataclasses.replace(
        load_config(config).spark, remote="sc://h:15002/;token=SECRET6;user_id=me"))
    assert "SECRET" not in json.dumps(cfg.as_dict())


@pytest.mark.parametrize("remote", ["sc://h x/;token=SECRET", "sc://u:SECRET@h:1",
                                    "http://h:1/?token=SECRET"])
def test_a_bad_spark_remote_is_refused_without_its_token(remote: str) -> None:
    with pytest.raises(ConfigError, match="must be a Spark Connect URL") as caught:
        config_from_dict({"rules": "r", "positions": "p", "out": "o",
                          "spark": {"remote": remote}})
    assert "SECRET" not in str(caught.value)

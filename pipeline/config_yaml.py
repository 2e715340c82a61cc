"""A config file's YAML -> Python values, refusing what only an attack or a slip needs (alias
bombs, huge integers, a key given twice); every error is a ConfigError naming the line. Apart
from `config`, so that yaml is imported only by a run that reads a config file."""

from __future__ import annotations

from typing import Any

import yaml

from pipeline.errors import ConfigError, brief_repr, truncated

MAX_ALIASED_VALUES = 1000  # values that YAML aliases may add in all (a config needs few, if any)
MAX_INT_CHARS = 100  # longer integers are refused before Python converts them (quadratic)


class _RefusedYaml(yaml.YAMLError):
    """YAML that parses but that a config file has no use for; `line` is 1-based."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


class _ConfigLoader(yaml.SafeLoader):
    """A SafeLoader that refuses what only an attack needs: aliases that expand to more than
    MAX_ALIASED_VALUES values in all (an alias bomb: a few hundred bytes that expand to
    gigabytes once a value is copied or printed), an alias inside the value it names, and
    integers of more than MAX_INT_CHARS characters."""

    def __init__(self, text: str):
        super().__init__(text)
        self.aliased_values = 0
        self.open_anchors: set[str] = set()
        self.sizes: dict[int, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: yaml.Node | None) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias is left to the composer's own error
                line = event.start_mark.line + 1
                if event.anchor in self.open_anchors:
                    raise _RefusedYaml(line, f"alias {brief_repr(event.anchor)} is inside the "
                                             "value it names (a recursive value)")
                self.aliased_values += _expanded_size(node, self.sizes)
                if self.aliased_values > MAX_ALIASED_VALUES:
                    raise _RefusedYaml(line, "YAML aliases expand to more than "
                                             f"{MAX_ALIASED_VALUES} values; a config file "
                                             "needs no more")
        return super().compose_node(parent, index)

    def compose_sequence_node(self, anchor: str | None) -> yaml.Node:
        return self._composing(anchor, super().compose_sequence_node)

    def compose_mapping_node(self, anchor: str | None) -> yaml.Node:
        return self._composing(anchor, super().compose_mapping_node)

    def _composing(self, anchor: str | None, compose: Any) -> yaml.Node:
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            return compose(anchor)
        finally:
            self.open_anchors.discard(anchor)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_INT_CHARS:
            raise _RefusedYaml(node.start_mark.line + 1,
                               f"an integer of {len(node.value)} characters")
        return super().construct_yaml_int(node)


_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_yaml_int)


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Values in `node` with every alias in it expanded (memoised by node, so shared nodes
    are counted in time linear in the file, not in the expansion)."""
    if id(node) not in sizes:
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        sizes[id(node)] = 1 + sum(_expanded_size(child, sizes) for child in children)
    return sizes[id(node)]


def parse_yaml(text: str, source: str) -> Any:
    """The document in `text`, through `_ConfigLoader`, with duplicate keys refused; every
    problem is a ConfigError naming the file and line."""
    try:
        loader = _ConfigLoader(text)  # its reader refuses control characters here
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise ConfigError(f"{source}: line {line} is not valid YAML (the control character "
                          f"U+{code:04X} is not allowed in a YAML file)", path=source,
                          row=line) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, "", source, set())
        return loader.construct_document(node)
    except _RefusedYaml as exc:
        raise ConfigError(f"{source}: line {exc.line}: {exc}", path=source,
                          row=exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}" if mark else ""
        problem = f" ({truncated(exc.problem, 120)})" if exc.problem else ""
        raise ConfigError(f"{source}:{where} is not valid YAML{problem}") from None
    except yaml.YAMLError:
        raise ConfigError(f"{source}: is not valid YAML") from None
    except RecursionError:
        raise ConfigError(f"{source}: values are nested too deeply") from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node: yaml.Node, path: str, source: str, seen: set[int]) -> None:
    """A key given twice in one mapping is an error naming it and both lines (YAML itself
    would keep the last silently). Merge keys (`<<`) are YAML's own override mechanism."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _refuse_duplicate_keys(child, path, source, seen)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    lines: dict[tuple[str, str], int] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):  # not a name: construction refuses it
            continue
        name = f"{path}.{key.value}" if path else key.value
        line = key.start_mark.line + 1
        if key.tag != "tag:yaml.org,2002:merge":
            if (key.tag, key.value) in lines:
                raise ConfigError(f"{source}: key {brief_repr(name)} is given twice (lines "
                                  f"{lines[key.tag, key.value]} and {line})")
            lines[key.tag, key.value] = line
        _refuse_duplicate_keys(value, name, source, seen)

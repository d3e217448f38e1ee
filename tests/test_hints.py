"""Every hint in a quarantine reason, an option error or a silver error names a key the pipeline
file accepts, spelled as the file spells it.

A hint is a pipeline key in a message: ``sources[].options.<option>`` (an option of a source,
with the value to set when the message gives one: ``sources[].options.without_position:
kafka-order``), ``sources[].<key>`` (a key of a source: ``sources[].primary_key``) or
``normalize.max_<limit>``. They are collected two ways:

- from the message templates: every string literal (docstrings left out) of the modules that
  write reasons and errors: the formats (:mod:`cdclake.formats`, every format module), the
  limits normalize checks (:mod:`cdclake.normalize`) and silver (:mod:`cdclake.silver`, whose
  Kafka-order error names ``without_position``);
- from the messages themselves: each format's parser run on records (and options) that give the
  hint-bearing reasons and errors, whose hints must be among the templates'.

For each hint a pipeline file setting exactly that key (the hint's value, else a sample value of
the key) is loaded with :func:`cdclake.config.load_pipeline`, the key is read back from the
loaded config, and a source option also builds the parser of the format that reads it
(:func:`cdclake.formats.get_parser` with the source's ``parser_options``), so the value is one
the format accepts. Hints in the old unqualified form (``set the source option X``, ``set the
option X``, ``set X`` for a source key) are refused: the file takes ``without_position`` only
under ``options`` (directly under the source it is ``Extra inputs are not permitted``). The one
unqualified hint kept, ``set primary_key for the source`` (the no-key reason, asserted verbatim by
the tests of five formats), names ``sources[].primary_key``, and is loaded as that.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from helpers import krec

from cdclake.config import load_pipeline
from cdclake.errors import ConfigError
from cdclake.formats import get_parser, parse_all
from cdclake.record import ParseError

JOBS = Path(__file__).resolve().parents[1] / "jobs" / "cdclake"
#: The packages whose string literals are message templates.
PACKAGES = ("formats", "normalize", "silver")

#: A qualified hint: the key, and the value the message gives (``key: value``), if any.
HINT = re.compile(r"(?P<key>sources\[\]\.(?:options\.)?[a-z_]+(?:\.[a-z_]+)*|normalize\.max_[a-z_]+)"
                  r"(?:: (?P<value>[a-z][a-z0-9-]*))?")
#: Hints in an unqualified form: the option or key without where the file takes it.
UNQUALIFIED = re.compile(r"\b(?:set|check|configure)(?: the)?(?: configured)?(?: source)?(?: option)? "
                         r"(?!sources\[\]|normalize\.|Maxwell|REPLICA|the CDL|it\b)([a-z]+_[a-z_]+|table)\b"
                         r"|\boptions? (?!do\b|of\b)([a-z]+_[a-z_]+)\b")
#: Unqualified hints kept (other formats' tests assert them verbatim) and the key each names.
LEGACY = {"set primary_key for the source": "sources[].primary_key"}

#: A sample value per key, for hints that give none.
SAMPLES = {
    "sources[].primary_key": ["id"],
    "sources[].primary_keys": {"shop.t": ["id"]},
    "sources[].options.column_types": {"shop.t": {"id": "bigint"}},
    "sources[].options.table": "dbo.t",
    "sources[].options.before_image_field": "before-image",
    "sources[].options.before_image_prefix": "BI_",
    "sources[].options.before_image_suffix": "_old",
    "sources[].options.no_hex_prefix": True,
    "sources[].options.schema_registry": {"url": "http://127.0.0.1:9"},
    "sources[].options.schema_registry.url": "http://127.0.0.1:9",
    "sources[].options.without_position": "quarantine",
    "normalize.max_value_bytes": 1024,
    "normalize.max_nesting_depth": 8,
}
#: The format reading each source option (the others: any format; ``maxwell-json`` is used).
OPTION_FORMAT = {"table": "qlik-json", "before_image_field": "aws-dms-json", "before_image_prefix": "aws-dms-json",
                 "before_image_suffix": "aws-dms-json", "no_hex_prefix": "aws-dms-json",
                 "schema_registry": "debezium-avro", "without_position": "maxwell-json"}


def templates() -> dict[str, list[str]]:
    """``{module path: [string literals]}`` of the message modules, docstrings left out; adjacent
    literals are one (Python joins them), an f-string's literal parts are joined with ``{}``."""
    out = {}
    for package in PACKAGES:
        for path in sorted((JOBS / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                    and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            texts = []
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                    texts.append(node.value)
                elif isinstance(node, ast.JoinedStr):
                    texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
            out[str(path.relative_to(JOBS))] = texts
    return out


def hints_in(text: str) -> set[tuple[str, object]]:
    """The qualified hints of ``text`` as ``(key, value or None)``, and the legacy ones it holds."""
    found = {(m["key"], m["value"]) for m in HINT.finditer(text)}
    return found | {(key, None) for phrase, key in LEGACY.items() if phrase in text}


def unqualified_in(text: str) -> list[str]:
    """Hints of ``text`` naming an option or source key without where the file takes it."""
    bad = [m.group(0) for m in UNQUALIFIED.finditer(text)]
    return [b for b in bad if not any(b in phrase for phrase in LEGACY)]


TEMPLATES = templates()
TEMPLATE_HINTS = sorted({h for texts in TEMPLATES.values() for t in texts for h in hints_in(t)},
                        key=lambda h: (h[0], str(h[1])))


def pipeline_setting(tmp_path: Path, key: str, value) -> Path:
    """A pipeline file whose one source (of the format reading ``key``) sets ``key`` to ``value``."""
    source: dict = {"topic": "t"}
    doc: dict = {"kafka": {"bootstrap_servers": "127.0.0.1:9"},
                 "catalog": {"uri": "jdbc:sqlite:/tmp/hints.db", "warehouse": "file:///tmp/hints"},
                 "sources": [source]}
    if key.startswith("normalize."):
        doc["normalize"] = {key.split(".", 1)[1]: value}
        source["format"] = "maxwell-json"
    else:
        path = key.removeprefix("sources[].").split(".")
        source["format"] = OPTION_FORMAT.get(path[1], "maxwell-json") if path[0] == "options" else "maxwell-json"
        node = source
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    p = tmp_path / f"{re.sub(r'[^a-z_]+', '_', key)}.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def read_back(cfg, key: str):
    """The value of ``key`` in the loaded config ``cfg``."""
    if key.startswith("normalize."):
        return getattr(cfg.normalize, key.split(".", 1)[1])
    node = cfg.sources[0]
    path = key.removeprefix("sources[].").split(".")
    node = getattr(node, path[0])
    for part in path[1:]:
        node = node[part]
    return node


def test_the_templates_hold_the_hints():
    """The scan finds the hints this test is about (a scan finding none would pass vacuously)."""
    keys = {k for k, _ in TEMPLATE_HINTS}
    assert {"sources[].options.without_position", "sources[].options.before_image_field", "sources[].options.table",
            "sources[].primary_key", "sources[].primary_keys", "sources[].options.column_types",
            "normalize.max_value_bytes", "normalize.max_nesting_depth"} <= keys, keys
    assert ("sources[].options.without_position", "kafka-order") in TEMPLATE_HINTS
    assert ("sources[].options.without_position", "quarantine") in TEMPLATE_HINTS


@pytest.mark.parametrize("module", sorted(TEMPLATES))
def test_no_hint_is_unqualified(module):
    """No message names an option or source key without where the pipeline file takes it."""
    bad = {t: unqualified_in(t) for t in TEMPLATES[module] if unqualified_in(t)}
    assert not bad, bad


@pytest.mark.parametrize("key, value", TEMPLATE_HINTS, ids=[f"{k}={v}" if v else k for k, v in TEMPLATE_HINTS])
def test_every_hint_names_a_key_the_pipeline_file_accepts(tmp_path, key, value):
    assert key in SAMPLES or value is not None, f"no sample value of {key}: add one to SAMPLES"
    want = SAMPLES[key] if value is None else value
    cfg = load_pipeline(pipeline_setting(tmp_path, key, want))
    assert read_back(cfg, key) == want
    if key.startswith("sources[]."):
        source = cfg.sources[0]
        get_parser(source.format, source.parser_options())  # the format takes the value


def test_the_old_hint_names_a_key_the_file_refuses(tmp_path):
    """``without_position`` directly under the source, as the old reason said ("set the source
    option without_position"), is refused; under ``options`` it loads."""
    path = pipeline_setting(tmp_path, "sources[].without_position", "kafka-order")
    with pytest.raises(ConfigError, match=r"key 'sources\.0\.without_position': Extra inputs are not permitted"):
        load_pipeline(path)
    assert unqualified_in("start Maxwell with output_binlog_position=true, or set the source option "
                          "without_position: kafka-order") == ["set the source option without_position"]


# --- the messages themselves --------------------------------------------------------------------

MAXWELL_ROW = {"database": "shop", "table": "t", "type": "update", "ts": 1700000000, "data": {"id": 1, "v": "a"},
               "primary_key_columns": ["id"]}


def _reason(fmt: str, value, options: dict, key=None) -> str:
    [(_, result)] = parse_all(get_parser(fmt, options), [krec(value, key)])
    assert isinstance(result, ParseError), result
    return str(result)


def _option_error(fmt: str, options: dict) -> str:
    with pytest.raises(ValueError) as err:
        get_parser(fmt, options)
    return str(err.value)


def runtime_messages() -> dict[str, str]:
    """Reasons and errors as the parsers, normalize's limits and silver give them."""
    from cdclake.normalize.limits import check_limits
    from cdclake.record import KafkaRecord
    from cdclake.silver.order import KAFKA_ORDER_HINT

    out = {
        "maxwell: no position (without_position: quarantine)":
            _reason("maxwell-json", MAXWELL_ROW, {"without_position": "quarantine"}),
        "maxwell: delete without its key column":
            _reason("maxwell-json", {**MAXWELL_ROW, "type": "delete", "data": {"v": "a"}}, {"primary_key": ["id"]}),
        "canal: no primary key":
            _reason("canal-json", {"data": [{"id": "1"}], "database": "shop", "table": "t", "type": "INSERT",
                                   "es": 1, "ts": 1, "isDdl": False}, {}),
        "aws-dms: a member of the BeforeImageSettings field":
            _reason("aws-dms-json", {"data": {"id": 1}, "before-image": {"id": 1},
                                     "metadata": {"record-type": "data", "operation": "update",
                                                  "schema-name": "shop", "table-name": "t"}},
                    {"primary_key": ["id"]}),
        "qlik: a data message naming no schema":
            _reason("qlik-json", {"magic": "atMSG", "type": "DT", "headers": None,
                                  "message": {"data": {"id": 1}, "beforeData": None,
                                              "headers": {"operation": "INSERT", "changeSequence": "1"}}}, {}),
        "silver: a key's changes without position over two partitions": KAFKA_ORDER_HINT,
    }
    for name, options in (("without_position", {"without_position": "guess"}),
                          ("before_image_field", {"before_image_field": "data"}),
                          ("no_hex_prefix", {"no_hex_prefix": "yes"}), ("table", {"table": " "}),
                          ("schema_registry", {"schema_registry": "x"}), ("column_types", {"column_types": [1]}),
                          ("primary_keys", {"primary_keys": [1]}), ("primary_key", {"primary_key": 5})):
        out[f"option error: {name}"] = _option_error(OPTION_FORMAT.get(name, "maxwell-json"), options)
    for name, limits in (("max_value_bytes", {"max_value_bytes": 4}), ("max_nesting_depth", {"max_nesting_depth": 2})):
        with pytest.raises(ParseError) as err:
            check_limits("maxwell-json", KafkaRecord("t", 0, 0, 0, None, b'{"a": {"b": [1]}}'), **limits)
        out[f"limit: {name}"] = str(err.value)
    return out


def test_runtime_messages_carry_qualified_hints_from_the_templates():
    """Each message's hints are qualified, found in the templates (so the load test above covers
    them), and each message has one."""
    template_keys = {k for k, _ in TEMPLATE_HINTS}
    for name, text in runtime_messages().items():
        hints = hints_in(text)
        assert hints, (name, text)
        assert not unqualified_in(text), (name, text)
        assert {k for k, _ in hints} <= template_keys, (name, text)
        assert hints <= set(TEMPLATE_HINTS) | {(k, None) for k in template_keys}, (name, text)
    maxwell = runtime_messages()["maxwell: no position (without_position: quarantine)"]
    assert "set sources[].options.without_position: kafka-order" in maxwell, maxwell

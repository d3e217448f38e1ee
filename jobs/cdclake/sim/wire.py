"""Every supported wire format of the simulated source: how to render it and how to configure it.

Used by the demo and the tests to run the same simulated history through every format.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from cdclake.formats.base import Format
from cdclake.formats.registry import by_name
from cdclake.sim.model import TABLES
from cdclake.sim.render_aliyun import aliyun_json
from cdclake.sim.render import Message, canal_json, debezium_json
from cdclake.sim.render_arcion import arcion_json
from cdclake.sim.render_cdl import cdl_json
from cdclake.sim.render_dms import BEFORE_IMAGE_FIELD, dms_json
from cdclake.sim.registry import registry_url
from cdclake.sim.render_debezium_avro import debezium_avro, debezium_jsonschema
from cdclake.sim.render_dts import dts_avro
from cdclake.sim.render_maxwell import maxwell_json
from cdclake.sim.render_ogg import ogg_json
from cdclake.sim.render_qlik import qlik_avro, qlik_json
from cdclake.sim.render_shareplex import shareplex_json


@dataclass(frozen=True)
class WireFormat:
    """A pipeline format name, a short tag (topic and table prefix), a renderer and source settings.

    ``options`` has the shape of a ``sources[]`` entry of a pipeline file (``primary_keys``,
    ``options: {column_types: ...}``): what a user configures for a format that does not carry
    keys or types itself.
    """

    format: str
    tag: str
    render: Callable[..., list[Message]]
    partitions: int = 1
    options: dict = field(default_factory=dict)

    @property
    def spec(self) -> Format:
        """The format as the pipeline declares it (:mod:`cdclake.formats.registry`); ``KeyError``
        for a name the closed list does not hold."""
        return by_name()[self.format]

    def messages(self, history: Sequence, tables: dict) -> list[Message]:
        """The history rendered in this format, spread over :attr:`partitions`."""
        return self.render(history, tables, partitions=self.partitions)


#: SharePlex JSON carries neither keys nor types: both are configured per table.
_SHAREPLEX = {"primary_keys": {t.name: list(t.primary_key) for t in TABLES.values()},
              "options": {"column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()}}}
#: AWS DMS carries neither keys (its Kafka key is the partition value) nor types; the rendering's
#: updates carry the ``BeforeImageSettings`` field.
_DMS = {"primary_keys": {t.name: list(t.primary_key) for t in TABLES.values()},
        "options": {"column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()},
                    "before_image_field": BEFORE_IMAGE_FIELD}}
#: CDL's own Decimal type carries no precision: decimal columns are configured.
_CDL = {"options": {"column_types": {t.name: {c.name: c.ctype for c in t.columns if c.ctype.startswith("decimal")}
                                     for t in TABLES.values()}}}

#: DTS Avro types a value by the value itself (decimal precision per value, nothing for a null):
#: decimal and nullable date columns are configured so that silver gets the declared types.
_DTS = {"options": {"column_types": {t.name: {c.name: c.ctype for c in t.columns
                                              if c.ctype.startswith("decimal") or (c.nullable and c.ctype != "string")}
                                     for t in TABLES.values()}}}

#: Maxwell's JSON carries no column types: they are configured per table (its Kafka keys name the keys).
_MAXWELL = {"options": {"column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()}}}
#: DataWorks JSON has six coarse types (LONG, DOUBLE, DATE ...): the columns whose declared type is
#: narrower (smallint, int, float, decimal, date) are configured.
_ALIYUN = {"options": {"column_types": {t.name: {c.name: c.ctype for c in t.columns
                                                 if c.ctype not in ("bigint", "double", "boolean", "string", "binary",
                                                                    "timestamp_ntz")}
                                        for t in TABLES.values()}}}
#: GoldenGate's JSON carries keys (``primary_keys``) but no types: every column is configured.
_OGG = {"options": {"column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()}}}
#: Debezium Avro and JSON Schema need their schema registry: the embedded stack's (``$CDC_SCHEMA_REGISTRY_URL``), else
#: one started in this process (:func:`cdclake.sim.registry.registry_url`).
_DBZ_AVRO = {"options": {"schema_registry": {"url": registry_url()}}}

WIRE_FORMATS: list[WireFormat] = [
    WireFormat("debezium-json", "dbz", debezium_json, partitions=3),
    WireFormat("canal-json", "canal", canal_json, partitions=2),
    WireFormat("arcion-json", "arcion", arcion_json, partitions=3),
    WireFormat("cdl-json", "cdl", cdl_json, partitions=3, options=_CDL),
    WireFormat("shareplex-json", "splex", shareplex_json, partitions=3, options=_SHAREPLEX),
    WireFormat("qlik-json", "qlikj", qlik_json, partitions=1),
    WireFormat("qlik-avro", "qlika", qlik_avro, partitions=1),
    WireFormat("dts-avro", "dts", dts_avro, partitions=1, options=_DTS),
    WireFormat("maxwell-json", "maxwell", maxwell_json, partitions=3, options=_MAXWELL),
    WireFormat("aws-dms-json", "dms", dms_json, partitions=3, options=_DMS),
    WireFormat("aliyun-json", "aliyun", aliyun_json, partitions=2, options=_ALIYUN),
    WireFormat("ogg-json", "ogg", ogg_json, partitions=3, options=_OGG),
    WireFormat("debezium-avro", "dbza", debezium_avro, partitions=3, options=_DBZ_AVRO),
    WireFormat("debezium-jsonschema", "dbzjs", debezium_jsonschema, partitions=2, options=_DBZ_AVRO),
]

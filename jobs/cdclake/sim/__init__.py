"""Test data: a simulated MySQL shop database and its change stream in CDC wire formats.

>>> import datetime as dt
>>> src = SimulatedSource(seed=7, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=3)
>>> history = src.run()
>>> messages = debezium_json(history, src.tables)            # or debezium_avro, canal_json, arcion_json, maxwell_json, dms_json, ogg_json, ...
>>> expected = src.final_state()                            # {table: {pk: {col: value}}}

``create_topic`` / ``produce`` put the messages on a broker (``create_topics`` / ``produce_to``: many topics).
"""
from cdclake.sim.kafka import create_topic, create_topics, produce, produce_to
from cdclake.sim.model import (
    TABLES,
    Column,
    RowChange,
    Table,
    Transaction,
    apply_change,
    as_text,
    replay,
)
from cdclake.sim.render_aliyun import aliyun_json
from cdclake.sim.render_arcion import arcion_json
from cdclake.sim.render_cdl import cdl_json
from cdclake.sim.render_dms import dms_json
from cdclake.sim.render_debezium_avro import debezium_avro, debezium_jsonschema
from cdclake.sim.render_dts import dts_avro
from cdclake.sim.render_maxwell import maxwell_json
from cdclake.sim.render_ogg import ogg_json
from cdclake.sim.render_qlik import qlik_avro, qlik_json
from cdclake.sim.render_shareplex import shareplex_json
from cdclake.sim.render import (
    Message,
    canal_json,
    decimal_from_base64,
    decimal_to_base64,
    debezium_json,
    delivery_delay_ms,
    state_before,
)
from cdclake.sim.source import SimulatedSource

__all__ = [
    "aliyun_json",
    "arcion_json",
    "cdl_json",
    "dms_json",
    "debezium_avro",
    "debezium_jsonschema",
    "dts_avro",
    "maxwell_json",
    "ogg_json",
    "qlik_avro",
    "qlik_json",
    "shareplex_json",
    "TABLES",
    "Column",
    "Message",
    "RowChange",
    "SimulatedSource",
    "Table",
    "Transaction",
    "apply_change",
    "as_text",
    "canal_json",
    "create_topic",
    "create_topics",
    "debezium_json",
    "decimal_from_base64",
    "decimal_to_base64",
    "delivery_delay_ms",
    "produce",
    "produce_to",
    "replay",
    "state_before",
]

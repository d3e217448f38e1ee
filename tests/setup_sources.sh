#!/usr/bin/env bash
# The local databases the "real database" tests read changes from (make deps runs this):
#   - PostgreSQL 15 at 127.0.0.1:5432: the wal2json output plugin (Debian's postgresql-15-wal2json)
#     and wal_level = logical (ALTER SYSTEM, then a restart of the cluster);
#   - MariaDB at 127.0.0.1:3306: the binary log in ROW format with full row images and full row
#     metadata (a file under /etc/mysql/mariadb.conf.d/, then a restart of the server).
# Each step checks first and does nothing when it is already done; a server that is absent is
# left alone (the tests say so). Needs root (or sudo) for apt, the config file and the restarts.
set -euo pipefail
SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
PG="psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atqc"

pg_up() { $PG 'select 1' >/dev/null 2>&1; }

if command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q '^15 \+main '; then
  if [ ! -f /usr/lib/postgresql/15/lib/wal2json.so ]; then
    echo "installing wal2json for PostgreSQL 15 (apt)"
    $SUDO apt-get install -y -qq postgresql-15-wal2json >/dev/null \
      || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq postgresql-15-wal2json >/dev/null; }
  fi
  pg_up || $SUDO pg_ctlcluster 15 main start || true
  if pg_up && [ "$($PG 'show wal_level')" != logical ]; then
    echo "PostgreSQL: wal_level = logical (ALTER SYSTEM, restart)"
    $PG "ALTER SYSTEM SET wal_level = logical" >/dev/null
    $SUDO pg_ctlcluster 15 main restart
    for _ in $(seq 30); do pg_up && break; sleep 1; done
  fi
  # This machine's build lists the libraries allowed as output plugins (output_plugin_libraries,
  # superuser, takes a reload); stock PostgreSQL has no such setting and allows any.
  plugins=$($PG "select setting from pg_settings where name = 'output_plugin_libraries'" 2>/dev/null || true)
  if [ -n "$plugins" ] && ! grep -qw wal2json <<<"$plugins"; then
    echo "PostgreSQL: output_plugin_libraries += wal2json (ALTER SYSTEM, reload)"
    list=$(tr -d '" ' <<<"$plugins" | tr ',' '\n' | grep -v '^$' | sed "s/.*/'&'/" | paste -sd,)
    $PG "ALTER SYSTEM SET output_plugin_libraries = ${list:+$list, }'wal2json'" >/dev/null
    $PG "select pg_reload_conf()" >/dev/null
  fi
  pg_up && echo "PostgreSQL 15: wal_level $($PG 'show wal_level'), wal2json $(test -f /usr/lib/postgresql/15/lib/wal2json.so && echo installed || echo MISSING)"
else
  echo "PostgreSQL 15 cluster 'main' not found: the PostgreSQL change-capture test will fail"
fi

MY="mysql -h 127.0.0.1 -P 3306 -u root -N -B -e"
my_up() { mysqladmin -h 127.0.0.1 -P 3306 -u root --connect-timeout=2 ping >/dev/null 2>&1; }
my_ready() { [ "$($MY 'select concat(@@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata)' 2>/dev/null)" = ONROWFULLFULL ]; }
my_start() {
  $SUDO install -d -o mysql -g mysql /run/mysqld
  $SUDO setsid -f /usr/sbin/mariadbd </dev/null >/dev/null 2>&1
  for _ in $(seq 60); do my_up && return 0; sleep 1; done
  echo "MariaDB did not start: see /var/log/mysql/error.log" >&2; return 1
}

if [ -x /usr/sbin/mariadbd ] && [ -f /etc/mysql/my.cnf ]; then
  CNF=/etc/mysql/mariadb.conf.d/60-cdclake-binlog.cnf
  if [ ! -f "$CNF" ]; then
    $SUDO install -d /etc/mysql/mariadb.conf.d
    printf '%s\n' "# Row-based binary log for change capture (the project's make deps)" "[mariadbd]" \
      "server_id = 1" "log_bin = mysql-bin" "binlog_format = ROW" "binlog_row_image = FULL" \
      "binlog_row_metadata = FULL" "binlog_expire_logs_seconds = 86400" | $SUDO tee "$CNF" >/dev/null
  fi
  grep -q '^!includedir /etc/mysql/mariadb.conf.d' /etc/mysql/my.cnf \
    || echo '!includedir /etc/mysql/mariadb.conf.d/' | $SUDO tee -a /etc/mysql/my.cnf >/dev/null
  my_up || my_start || true
  if my_up && ! my_ready; then
    echo "MariaDB: binary log on, ROW format, FULL row image and metadata (restart)"
    mysqladmin -h 127.0.0.1 -P 3306 -u root shutdown
    for _ in $(seq 30); do my_up || break; sleep 1; done
    my_start
  fi
  my_up && echo "MariaDB: log_bin, binlog_format, binlog_row_image, binlog_row_metadata = $($MY 'select concat_ws(" ", @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata)')"
else
  echo "MariaDB not found: the MariaDB change-capture test will fail"
fi

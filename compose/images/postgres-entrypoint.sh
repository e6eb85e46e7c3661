#!/bin/sh
# First start: initdb, the password, the role and database from POSTGRES_* (as the official
# image); then the server in the foreground (SIGTERM = smart shutdown).
set -eu
bin="$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1 || command -v initdb)")"
user="${POSTGRES_USER:-postgres}" db="${POSTGRES_DB:-${POSTGRES_USER:-postgres}}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw="$(mktemp)"; printf '%s\n' "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" >"$pw"
  "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != "postgres" ]; then
    "$bin/postgres" -D "$PGDATA" -c listen_addresses= -k /var/run/postgresql &
    until "$bin/pg_isready" -q -h /var/run/postgresql; do sleep 0.2; done
    "$bin/createdb" -h /var/run/postgresql -U "$user" "$db"
    "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
  fi
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -k /var/run/postgresql "$@"

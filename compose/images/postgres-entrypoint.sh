#!/bin/sh
# First start: initdb, the superuser's password and the database from POSTGRES_* (as the official
# image). With JPU_APP_USER / JPU_APP_PASSWORD also the services' own role: login, not superuser,
# owner of POSTGRES_DB, CREATEDB for the audit's scratch database (SPEC SEC2, E6); its password is set again at every start (rotation = change
# the secret, restart). Every connection, socket or TCP, needs a password: scram-sha-256, never
# trust. The roles and database are made offline (single-user mode): no password on a command line.
set -eu
bin="$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1 || command -v initdb)")"
user="${POSTGRES_USER:-postgres}" db="${POSTGRES_DB:-${POSTGRES_USER:-postgres}}"
app="${JPU_APP_USER:-}"
marker="$PGDATA/jpu-sec2"  # written by this entrypoint: a data dir from before SEC2 has none
fail() { echo "jpu-postgres: $*" >&2; exit 1; }
single() {  # one statement a line; single-user mode exits 0 even on an error, so look for one
  out="$("$bin/postgres" --single -D "$PGDATA" postgres 2>&1)" || fail "single-user mode: $out"
  case "$out" in *ERROR:*) fail "single-user mode: $out" ;; esac
}
quote() { printf '%s' "$1" | sed "s/'/''/g"; }
[ "$app" != "$user" ] || fail "JPU_APP_USER must not be the superuser POSTGRES_USER ($user)"
chmod 0700 /var/run/postgresql 2>/dev/null || true  # the socket: the server's user only
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw="$(mktemp)"; printf '%s\n' "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" >"$pw"
  "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pw" \
    --auth-local=scram-sha-256 --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  owner="${app:-$user}"
  if [ -n "$app" ]; then
    printf 'CREATE ROLE "%s" LOGIN\n' "$app" | single
  fi
  if [ "$db" != "postgres" ]; then
    printf 'CREATE DATABASE "%s" OWNER "%s"\n' "$db" "$owner" | single
  fi
  : >"$marker"
elif [ -n "$app" ] && [ ! -e "$marker" ]; then
  fail "$PGDATA was initialised before SPEC SEC2 (superuser = the services' role, local trust);" \
    "remove this volume and start again (the projections are rebuilt from the event log; users" \
    "and tokens are created again with python -m jpu.tools.admin)"
fi
if [ -n "$app" ]; then
  printf 'ALTER ROLE "%s" WITH LOGIN NOSUPERUSER NOCREATEROLE CREATEDB PASSWORD '"'"'%s'"'"'\n' \
    "$app" "$(quote "${JPU_APP_PASSWORD:?set JPU_APP_PASSWORD}")" | single
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -k /var/run/postgresql "$@"

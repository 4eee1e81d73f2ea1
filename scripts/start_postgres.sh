#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server (Debian's postgresql package) for the distributed-search tests,
# listening on 127.0.0.1 only, and prints its URL. Reuses the server when it is already up.
#   ATLAS_PG_PORT (default 55433) picks the port; the data lives in /tmp/atlas-pg-<port>.
set -euo pipefail
PORT=${ATLAS_PG_PORT:-55433}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  echo "start_postgres: PostgreSQL server binaries not found (apt-get install postgresql)" >&2
  exit 1
fi
DATA=/tmp/atlas-pg-$PORT
AS=()
if [ "$(id -u)" = 0 ]; then AS=(runuser -u postgres --); fi  # the server refuses to run as root
if ! "${AS[@]}" "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  rm -rf "$DATA" && mkdir -p "$DATA"
  [ "$(id -u)" = 0 ] && chown postgres "$DATA"
  "${AS[@]}" "$BIN/initdb" -D "$DATA" -A trust -U atlas >/dev/null
  "${AS[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
    -o "-p $PORT -k $DATA -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
fi
echo "postgresql://atlas@127.0.0.1:$PORT/postgres"

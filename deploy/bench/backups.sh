#!/usr/bin/env bash
# The backups benchmark (README "Performance", issue 14): a generated site of about 1 GiB
# (files, half incompressible, half text; and a PostgreSQL database), then
#   1. backup_run (a full) by the agent's own code (capstan-backup-bench run) into a plain
#      object store in another process, with its peak RSS (VmHWM);
#   2. the raw pipeline on the same data in the same run:
#      tar | zstd -3 | age  and  pg_dump -Fc -Z0 | zstd -3 | age, written to the same disk.
# Needs: a release build of the bench binary
#   cargo build --release -p capstan-agent --features bench --bin capstan-backup-bench
# and age, zstd, tar, psql, pg_dump (deploy/local/services.sh ensure_backup_tools).
# Environment: BENCH_FILES_MIB (default 900), BENCH_ROWS (default 800000),
# CAPSTAN_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1/postgres),
# BENCH_BIN (default $CARGO_TARGET_DIR or target, /release/capstan-backup-bench).
set -euo pipefail
files_mib=${BENCH_FILES_MIB:-900}
rows=${BENCH_ROWS:-800000}
base_url=${CAPSTAN_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1/postgres}
bin=${BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/capstan-backup-bench}
[ -x "$bin" ] || { echo "build it first: cargo build --release -p capstan-agent --features bench --bin capstan-backup-bench" >&2; exit 1; }

work=$(mktemp -d /var/tmp/capstan-backup-bench.XXXXXX)
db="bench_site_$$"
store_pid=
cleanup() {
    [ -n "$store_pid" ] && kill "$store_pid" 2>/dev/null || true
    psql -X -q "$base_url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

echo "== generating the site in $work"
root="$work/www"
mkdir -p "$root"
count=$((files_mib / 4))
for ((i = 0; i < count; i++)); do
    dir="$root/d$((i % 16))"
    mkdir -p "$dir"
    if ((i % 2)); then
        head -c 4194304 /dev/urandom >"$dir/blob$i.bin"
    else
        # (head closes the pipe early: yes's SIGPIPE is expected, not a failure)
        head -c 4194304 >"$dir/log$i.txt" \
            < <(yes "GET /shop/item/$i?ref=home HTTP/1.1 200 5123 \"Mozilla/5.0 (X11; Linux x86_64)\" $RANDOM")
    fi
done
psql -X -q "$base_url" -c "CREATE DATABASE $db"
db_url="${base_url%/*}/$db"
psql -X -q "$db_url" -c "CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz, body text);
  INSERT INTO events SELECT g, now() - g * interval '1 second', md5(g::text) || repeat(' event payload', 6)
  FROM generate_series(1, $rows) g;"
db_bytes=$(psql -X -A -t "$db_url" -c "SELECT pg_database_size(current_database())")
file_bytes=$(du -sb "$root" | cut -f1)
echo "files: $file_bytes bytes; database: $db_bytes bytes"

state="$work/state"
mkdir -m 700 "$state"
printf '%s\n' "$db_url" >"$work/db.url"
printf '{"root": "%s", "database": {"url_file": "%s"}}\n' "$root" "$work/db.url" >"$state/site.json"
chmod 600 "$state/site.json"
age-keygen -o "$work/owner.key" 2>/dev/null
recipient=$(age-keygen -y "$work/owner.key")

port=$((20000 + RANDOM % 20000))
mkdir "$work/store"
"$bin" store "$work/store" "$port" &
store_pid=$!
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
sync

echo "== backup_run (the agent's code)"
agent_line=$("$bin" run "$state" "$port" 1)
echo "$agent_line"
agent_seconds=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$agent_line")
sync

echo "== raw pipeline: tar | zstd | age ; pg_dump | zstd | age"
start=$(date +%s.%N)
tar -C "$root" -cf - . | zstd -3 -q | age -r "$recipient" >"$work/raw-files.tar.zst.age"
PGDATABASE=$db pg_dump -d "$db_url" --format=custom --compress=0 | zstd -3 -q | age -r "$recipient" >"$work/raw-db.dump.zst.age"
end=$(date +%s.%N)
raw_seconds=$(echo "$end - $start" | bc -l)
total=$((file_bytes + db_bytes))
printf 'site bytes: %d\n' "$total"
printf 'agent backup_run: %.2f s, %.1f MiB/s\n' "$agent_seconds" "$(echo "$total / $agent_seconds / 1048576" | bc -l)"
printf 'raw pipeline:     %.2f s, %.1f MiB/s\n' "$raw_seconds" "$(echo "$total / $raw_seconds / 1048576" | bc -l)"
printf 'ratio (agent / raw throughput): %.2f\n' "$(echo "$raw_seconds / $agent_seconds" | bc -l)"

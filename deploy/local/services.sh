# shellcheck shell=bash
#
# The local servers the plane needs on a Debian/Ubuntu machine: PostgreSQL and NATS with
# JetStream, installed with apt-get when absent and started when not running. Sourced by
# deploy/local/up and by the test runner; sourcing only defines the functions below, capstan_log
# and helpers prefixed `_capstan_`, and changes no shell option, so it works under `set -euo
# pipefail` and without it. Every function logs one line per step on stderr and returns
# non-zero, with a message saying why, when it cannot do its job.
#
#   ensure_postgres          PostgreSQL installed, running, answering (127.0.0.1:5432 or socket)
#   ensure_postgres_connections N   max_connections at least N (ALTER SYSTEM and a restart)
#   ensure_nats              nats-server with JetStream listening on 127.0.0.1:4222
#   database_url [DB]        prints a URL for database DB (default capstan) that works here
#   ensure_database [DB]     creates database DB (default capstan) when it is missing
#   ensure_s3_server         the backups tests' S3 server (s3s-fs, built once with cargo)
#   ensure_sshd              Debian's openssh-server (/usr/sbin/sshd), for the provisioning tests
#
# Where ensure_nats keeps a server it starts (defaults shown; the pid file is how it tells its
# own server from any other nats-server):
#   CAPSTAN_LOCAL_NATS_STORE=/var/lib/nats-server  CAPSTAN_LOCAL_NATS_LOG=/var/log/nats-server.log
#   CAPSTAN_LOCAL_NATS_PIDFILE=/run/capstan-nats-server.pid
#
# Database access: where PostgreSQL trusts 127.0.0.1 (as on this project's machines) the URL is
# postgres://postgres@127.0.0.1/DB. On a fresh Debian install TCP wants a password but the Unix
# socket uses peer authentication, so the current OS user is made a PostgreSQL superuser (via
# the postgres OS user, once) and the URL goes through the socket:
# postgres://USER@%2Fvar%2Frun%2Fpostgresql/DB.

capstan_log() {
    printf 'capstan: %s\n' "$*" >&2
}

# Runs a command as root: directly when we are root, else through sudo.
_capstan_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        capstan_log "needs root (and there is no sudo) to run: $*"
        return 1
    fi
}

# Runs a command as the postgres OS user (for peer authentication on the socket).
_capstan_as_postgres() {
    if [ "$(id -un)" = postgres ]; then
        "$@"
    elif [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -u postgres -- "$@"
    else
        capstan_log "needs root or sudo to act as the postgres user: $*"
        return 1
    fi
}

# apt-get install, running apt-get update first (once per shell) since a fresh machine has no
# package lists. Output goes to a log file, shown only when something fails.
_capstan_apt_install() {
    local log="${TMPDIR:-/tmp}/capstan-apt.log"
    if [ -z "${_CAPSTAN_APT_UPDATED:-}" ]; then
        capstan_log "apt-get update (log: $log)"
        if ! _capstan_as_root env DEBIAN_FRONTEND=noninteractive apt-get update >"$log" 2>&1; then
            tail -n 20 "$log" >&2
            capstan_log "apt-get update failed"
            return 1
        fi
        _CAPSTAN_APT_UPDATED=1
    fi
    capstan_log "apt-get install $*"
    if ! _capstan_as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "$@" >>"$log" 2>&1; then
        tail -n 20 "$log" >&2
        capstan_log "apt-get install $* failed"
        return 1
    fi
}

# True when something accepts TCP connections on HOST PORT (bounded: 2 seconds).
# The browser tests drive Debian's Chromium through chromedriver (tests/tests/suite/ui).
ensure_browser() {
    if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
        return 0
    fi
    capstan_log "installing chromium and chromium-driver for the browser tests"
    _capstan_apt_install chromium chromium-driver fonts-dejavu-core
}

# The incidents tests' SMTP server: Python's aiosmtpd, from PyPI when absent (with Debian's
# python3-pip when pip itself is missing).
ensure_smtp_server() {
    if python3 -c 'import aiosmtpd' 2>/dev/null; then
        return 0
    fi
    if ! python3 -m pip --version >/dev/null 2>&1; then
        _capstan_apt_install python3-pip || return 1
    fi
    capstan_log "installing aiosmtpd (PyPI) for the incidents tests' SMTP server"
    python3 -m pip install --quiet aiosmtpd 2>/dev/null ||
        python3 -m pip install --quiet --break-system-packages aiosmtpd
}

# The backups tests' S3-compatible server: the s3s project's file-system server (`s3s-fs`
# from crates.io, built once with `cargo install` into CAPSTAN_S3_SERVER_ROOT, default
# ~/.cache/capstan/tools/s3s-fs). It checks SigV4 headers and presigned URLs against the one
# access key it is started with (a bad signature is refused) and honours `If-None-Match: *` on
# PUT. Version 0.14.1 is the newest that builds with this workspace's toolchain (1.95).
# tests/src/s3.rs starts one per test; CAPSTAN_S3_SERVER names the binary to it.
CAPSTAN_S3_SERVER_VERSION=0.14.1
ensure_s3_server() {
    local root="${CAPSTAN_S3_SERVER_ROOT:-$HOME/.cache/capstan/tools/s3s-fs}"
    local binary="$root/bin/s3s-fs"
    if [ -x "$binary" ] && "$binary" --version 2>/dev/null | grep -q "$CAPSTAN_S3_SERVER_VERSION"; then
        export CAPSTAN_S3_SERVER="$binary"
        return 0
    fi
    local log="${TMPDIR:-/tmp}/capstan-s3s-fs-install.log"
    capstan_log "building s3s-fs $CAPSTAN_S3_SERVER_VERSION (crates.io) for the backups tests (log: $log)"
    if ! cargo install --locked --quiet "s3s-fs@$CAPSTAN_S3_SERVER_VERSION" --features binary \
        --root "$root" --target-dir "${TMPDIR:-/tmp}/capstan-s3s-fs-build" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        capstan_log "cargo install s3s-fs failed"
        return 1
    fi
    export CAPSTAN_S3_SERVER="$binary"
}

# The backups tests (services/agent/tests/backups.rs) and README "Disaster recovery by hand":
# Debian's stock age and zstd, and the PostgreSQL client programs (pg_dump, pg_restore, psql).
ensure_backup_tools() {
    local missing=()
    [ -x /usr/bin/age ] || missing+=(age)
    [ -x /usr/bin/zstd ] || missing+=(zstd)
    [ -x /usr/bin/pg_restore ] || missing+=(postgresql-client)
    [ -x /usr/bin/curl ] || missing+=(curl)
    if [ ${#missing[@]} -eq 0 ]; then
        return 0
    fi
    capstan_log "installing ${missing[*]} for the backups tests"
    _capstan_apt_install "${missing[@]}"
}

# The provisioning tests (services/provisioning/tests/ssh.rs and the bootstrap end-to-end tests)
# start their own sshd per stand-in instance, in private namespaces with their own configuration
# and host keys; only the program is needed. The package's own service is left as the package
# leaves it: the tests never use it.
ensure_sshd() {
    if [ -x /usr/sbin/sshd ] && [ -x /usr/bin/ssh-keygen ]; then
        return 0
    fi
    capstan_log "installing openssh-server for the provisioning tests"
    _capstan_apt_install openssh-server
}

_capstan_tcp_open() {
    # shellcheck disable=SC2016 # $0 and $1 are expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}

# Waits up to SECONDS for COMMAND... to succeed, polling every half second.
_capstan_wait_for() {
    local seconds=$1 tries
    shift
    for ((tries = seconds * 2; tries > 0; tries--)); do
        if "$@"; then
            return 0
        fi
        sleep 0.5
    done
    return 1
}

# True when PostgreSQL accepts connections on 127.0.0.1:5432 or on the Debian socket.
_capstan_postgres_answering() {
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -t 2 -h 127.0.0.1 -p 5432 || pg_isready -q -t 2 -h /var/run/postgresql -p 5432
    else
        _capstan_tcp_open 127.0.0.1 5432
    fi
}

_capstan_postgres_installed() {
    command -v psql >/dev/null 2>&1 &&
        command -v pg_ctlcluster >/dev/null 2>&1 &&
        compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

ensure_postgres() {
    if _capstan_postgres_answering; then
        if ! command -v psql >/dev/null 2>&1; then
            _capstan_apt_install postgresql-client || return 1
        fi
        capstan_log "PostgreSQL: already answering"
        return 0
    fi
    if ! _capstan_postgres_installed; then
        _capstan_apt_install postgresql || return 1
    fi
    # The package may have started it already (on a machine with systemd).
    if ! _capstan_postgres_answering; then
        local version
        version=$(find /etc/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null |
            sort -V | tail -n 1)
        if [ -n "$version" ] && command -v pg_ctlcluster >/dev/null 2>&1; then
            capstan_log "PostgreSQL: starting cluster $version/main (pg_ctlcluster)"
            if ! _capstan_as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start; then
                capstan_log "PostgreSQL: pg_ctlcluster failed; trying: service postgresql start"
                _capstan_as_root service postgresql start || true
            fi
        else
            capstan_log "PostgreSQL: starting (service postgresql start)"
            _capstan_as_root service postgresql start || true
        fi
    fi
    capstan_log "PostgreSQL: waiting for 127.0.0.1:5432 (up to 30 s)"
    if ! _capstan_wait_for 30 _capstan_postgres_answering; then
        capstan_log "PostgreSQL did not answer on 127.0.0.1:5432 within 30 s; see /var/log/postgresql/ (pg_lsclusters lists the clusters)"
        return 1
    fi
    capstan_log "PostgreSQL: answering"
}

# Makes the local PostgreSQL accept at least N connections (the test suite runs whole planes of
# services side by side, each with its own pool): raises max_connections with ALTER SYSTEM and
# restarts the cluster when it is lower. Only for a cluster this machine runs (pg_ctlcluster).
ensure_postgres_connections() {
    local wanted=$1 url current version
    url=$(database_url postgres) || return 1
    current=$(psql "$url" -Atc 'SHOW max_connections' 2>/dev/null) || {
        capstan_log "PostgreSQL: cannot read max_connections"
        return 1
    }
    if [ "$current" -ge "$wanted" ]; then
        return 0
    fi
    version=$(find /etc/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null |
        sort -V | tail -n 1)
    if [ -z "$version" ] || ! command -v pg_ctlcluster >/dev/null 2>&1; then
        capstan_log "PostgreSQL: max_connections is $current (the tests want $wanted) and this is not a local pg_ctlcluster cluster; raise it by hand"
        return 0
    fi
    capstan_log "PostgreSQL: max_connections $current -> $wanted (ALTER SYSTEM, restarting cluster $version/main)"
    psql "$url" -qc "ALTER SYSTEM SET max_connections = $wanted" || return 1
    _capstan_as_root pg_ctlcluster --skip-systemctl-redirect "$version" main restart || return 1
    _capstan_wait_for 30 _capstan_postgres_answering
}

# The INFO line a NATS server greets every client with; it says whether JetStream is on.
_capstan_nats_info() {
    # shellcheck disable=SC2016 # $line is the inner bash's
    timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222 && IFS= read -r line <&3 && printf "%s\n" "$line"' 2>/dev/null
}

_capstan_nats_listening() {
    _capstan_tcp_open 127.0.0.1 4222
}

# True when the server on 127.0.0.1:4222 answers and has JetStream enabled.
_capstan_nats_jetstream() {
    local info
    info=$(_capstan_nats_info) || return 1
    [[ $info == *'"jetstream":true'* ]]
}

ensure_nats() {
    local store=${CAPSTAN_LOCAL_NATS_STORE:-/var/lib/nats-server}
    local log=${CAPSTAN_LOCAL_NATS_LOG:-/var/log/nats-server.log}
    local pidfile=${CAPSTAN_LOCAL_NATS_PIDFILE:-/run/capstan-nats-server.pid}
    if _capstan_nats_listening; then
        if _capstan_nats_jetstream; then
            capstan_log "NATS: already listening on 127.0.0.1:4222 with JetStream"
            return 0
        fi
        capstan_log "NATS on 127.0.0.1:4222 runs without JetStream; stop it (systemctl disable --now nats-server, if it is the packaged service) and run this again, or restart it with -js -sd DIR"
        return 1
    fi
    if [ ! -x /usr/sbin/nats-server ]; then
        _capstan_apt_install nats-server || return 1
        # With systemd, the package starts its own service from /etc/nats-server.conf, which
        # has no JetStream and would hold the port: the plane's server replaces it.
        if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
            capstan_log "NATS: disabling the packaged nats-server.service (it runs without JetStream)"
            _capstan_as_root systemctl disable --now nats-server.service >/dev/null 2>&1 || true
        fi
    fi
    capstan_log "NATS: starting nats-server with JetStream on 127.0.0.1:4222 (store $store, log $log)"
    _capstan_as_root mkdir -p "$store" || return 1
    _capstan_as_root start-stop-daemon --start --oknodo --background \
        --pidfile "$pidfile" --make-pidfile \
        --exec /usr/sbin/nats-server -- \
        -a 127.0.0.1 -p 4222 -js -sd "$store" -l "$log" || return 1
    capstan_log "NATS: waiting for 127.0.0.1:4222 (up to 20 s)"
    if ! _capstan_wait_for 20 _capstan_nats_jetstream; then
        capstan_log "NATS did not come up with JetStream on 127.0.0.1:4222 within 20 s; see $log"
        return 1
    fi
    capstan_log "NATS: listening with JetStream"
}

# psql as the postgres superuser over TCP, with no password from anywhere: succeeds only where
# PostgreSQL trusts 127.0.0.1.
_capstan_psql_tcp() {
    env -u PGPASSWORD PGPASSFILE=/nonexistent/capstan-no-pgpass PGCONNECT_TIMEOUT=3 \
        psql -X -w -q -h 127.0.0.1 -p 5432 -U postgres "$@"
}

# psql as the current OS user over the Unix socket (peer authentication).
_capstan_psql_socket() {
    env PGCONNECT_TIMEOUT=3 psql -X -w -q -h /var/run/postgresql -p 5432 -U "$(id -un)" "$@"
}

_capstan_trusts_tcp() {
    _capstan_psql_tcp -d postgres -c 'select 1' >/dev/null 2>&1
}

# Makes the current OS user a PostgreSQL superuser (through the postgres OS user), once.
_capstan_ensure_socket_superuser() {
    local user found
    user=$(id -un)
    if [ "$user" = postgres ]; then
        return 0
    fi
    found=$(printf "select 1 from pg_roles where rolname = :'name';\n" |
        _capstan_as_postgres psql -X -q -A -t -d postgres -v name="$user") || {
        capstan_log "cannot reach PostgreSQL as the postgres user over its socket"
        return 1
    }
    if [ "$found" != 1 ]; then
        capstan_log "PostgreSQL: creating superuser role $user (peer authentication over the socket)"
        _capstan_as_postgres createuser -s "$user" || return 1
    fi
}

database_url() {
    local db=${1:-capstan} user
    if _capstan_trusts_tcp; then
        printf 'postgres://postgres@127.0.0.1/%s\n' "$db"
        return 0
    fi
    _capstan_ensure_socket_superuser || return 1
    user=$(id -un)
    if ! _capstan_psql_socket -d postgres -c 'select 1' >/dev/null 2>&1; then
        capstan_log "PostgreSQL accepts neither postgres over 127.0.0.1 without a password nor $user over the socket; set CAPSTAN__DATABASE__URL"
        return 1
    fi
    printf 'postgres://%s@%%2Fvar%%2Frun%%2Fpostgresql/%s\n' "$user" "$db"
}

ensure_database() {
    local db=${1:-capstan} mode found
    if _capstan_trusts_tcp; then
        mode=tcp
    else
        _capstan_ensure_socket_superuser || return 1
        mode=socket
    fi
    found=$(printf "select 1 from pg_database where datname = :'db';\n" |
        "_capstan_psql_$mode" -A -t -d postgres -v db="$db") || {
        capstan_log "cannot query PostgreSQL for database $db"
        return 1
    }
    if [ "$found" = 1 ]; then
        capstan_log "PostgreSQL: database $db exists"
        return 0
    fi
    capstan_log "PostgreSQL: creating database $db"
    if [ "$mode" = tcp ]; then
        env -u PGPASSWORD PGPASSFILE=/nonexistent/capstan-no-pgpass createdb -w -h 127.0.0.1 -p 5432 -U postgres "$db"
    else
        createdb -w -h /var/run/postgresql -p 5432 -U "$(id -un)" "$db"
    fi
}

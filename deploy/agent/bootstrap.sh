#!/bin/sh
# Bootstraps a freshly provisioned machine (issue 29; PV-03, PV-04, PV-09, AC-10), as root:
# the plane's provisioning service uploads this directory (/root/capstan-bootstrap/) over SSH
# and runs exactly `sh /root/capstan-bootstrap/bootstrap.sh`. Beside this script:
#   capstan-agent            the agent binary
#   install.sh               deploy/agent/install.sh
#   bootstrap.env            what to install (below); read line by line, never evaluated
#   capstan-agent-supervise  deploy/agent/capstan-agent-supervise: only for cron supervision
#   capstan-agent.service    deploy/systemd/capstan-agent.service: only for systemd supervision
#
# bootstrap.env holds KEY=value lines (blank lines and lines starting with # are skipped).
# A value is one or more of A-Z a-z 0-9 . _ : / @ - (nothing else: no quotes, spaces or $),
# a key is given once, and an unknown key is refused.
#   CAPSTAN_PLANE_URL      the management node's URL (https://host[:port]) the agent joins
#   CAPSTAN_NAME           the node's name, ^[a-z0-9][a-z0-9._-]{0,63}$ (at most 59 for a
#                          docker-host, whose agent joins as NAME-host)
#   CAPSTAN_KIND           agent | site | docker-host
#   CAPSTAN_AGENT_LOCAL_ADDRESS      optional: the local IP the agent connects from (the
#                          instance's address, which the plane's auto-approval compares, AC-08)
#   CAPSTAN_SUPERVISION    optional: systemd | cron | process (default: systemd when it runs,
#                          else cron when a cron daemon runs, else process)
#   CAPSTAN_PREFIX         optional: as --prefix (which wins), for a login that is not root
#   CAPSTAN_SITE_DATABASE_ADMIN_URL  optional (the environment's variable of that name wins):
#                          where a site's database and role are made, `psql "$URL"`; unset,
#                          `runuser -u postgres -- psql` (PostgreSQL installed with apt-get
#                          when absent). It should carry no password (psql's argv shows it).
#
# The kinds:
#   agent        the agent, enabled, joining as NAME; siteless
#   site         the same, with the site root /var/www/NAME laid out for site releases
#                (releases/, shared/, shared/logs/; docs/site-releases.md), a PostgreSQL role
#                and database site_NAME (. and - become _) whose password is generated here
#                and written only to /etc/capstan-agent/site-db.url (0600), and site.json
#                naming both (0600, as the agent reads it; docs/agent.md). A site already here
#                (its root, its site.json, its role or database) is refused: PV-02, the
#                machine is cleaned by hand before a retry.
#   docker-host  the host agent, explicitly siteless, joining as NAME-host (PV-09), with
#                /srv/capstan/containers for the site containers (no Docker engine needed)
#
# Output: everything on stdout (stderr is joined to it). Exactly one line
#   CAPSTAN_AGENT_KEY=SHA256:...   the fingerprint of the key the agent joins with (AC-10)
# and, last, `bootstrap: installed ...` (exit 0) or `bootstrap: failed: <reason>` (exit 1).
# No line holds a secret: the database password never leaves the file it is written to.
#
# Usage: bootstrap.sh [--prefix=DIR]
#   --prefix   everything under DIR, a scratch root (tests; root not needed): install.sh
#              --prefix, the site root, site.json, the containers' directory; the database
#              is still made where CAPSTAN_SITE_DATABASE_ADMIN_URL says
set -eu
exec 2>&1

HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=""
for argument in "$@"; do
    case "$argument" in
        --prefix=*) PREFIX=${argument#--prefix=} ;;
        -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
        *) echo "bootstrap: failed: unknown argument (only --prefix=DIR)"; exit 64 ;;
    esac
done

finished=no
on_exit() {
    status=$?
    if [ "$status" -ne 0 ] && [ "$finished" = no ]; then
        echo "bootstrap: failed: a step exited with status $status (the lines above say which)"
    fi
}
trap on_exit EXIT
fail() {
    finished=yes
    echo "bootstrap: failed: $*"
    exit 1
}

# runuser's psql would complain about a home it cannot enter.
cd /

# --- bootstrap.env, read and never evaluated --------------------------------------------
ENV_FILE=$HERE/bootstrap.env
[ -f "$ENV_FILE" ] || fail "no bootstrap.env beside bootstrap.sh ($ENV_FILE)"
PLANE_URL=""
NAME=""
KIND=""
LOCAL_ADDRESS=""
SUPERVISION=""
FILE_ADMIN_URL=""
FILE_PREFIX=""
seen=" "
line_number=0
while IFS= read -r line || [ -n "$line" ]; do
    line_number=$((line_number + 1))
    case "$line" in
        ""|"#"*) continue ;;
        *=*) ;;
        *) fail "bootstrap.env line $line_number is not KEY=value" ;;
    esac
    key=${line%%=*}
    value=${line#*=}
    case "$key" in
        ""|*[!A-Z0-9_]*) fail "bootstrap.env line $line_number: the key is not a name of capitals, digits and _" ;;
    esac
    # The value is never repeated: it may be a URL with a password.
    case "$value" in
        "") fail "bootstrap.env line $line_number: $key is empty (leave the line out instead)" ;;
        *[!A-Za-z0-9._:/@-]*) fail "bootstrap.env line $line_number: $key holds a character outside A-Z a-z 0-9 . _ : / @ -" ;;
    esac
    case "$seen" in
        *" $key "*) fail "bootstrap.env line $line_number: $key is given twice" ;;
    esac
    seen="$seen$key "
    case "$key" in
        CAPSTAN_PLANE_URL) PLANE_URL=$value ;;
        CAPSTAN_NAME) NAME=$value ;;
        CAPSTAN_KIND) KIND=$value ;;
        CAPSTAN_AGENT_LOCAL_ADDRESS) LOCAL_ADDRESS=$value ;;
        CAPSTAN_SUPERVISION) SUPERVISION=$value ;;
        CAPSTAN_SITE_DATABASE_ADMIN_URL) FILE_ADMIN_URL=$value ;;
        CAPSTAN_PREFIX) FILE_PREFIX=$value ;;
        *) fail "bootstrap.env line $line_number: $key is not a key (CAPSTAN_PLANE_URL, CAPSTAN_NAME, CAPSTAN_KIND, CAPSTAN_AGENT_LOCAL_ADDRESS, CAPSTAN_SUPERVISION, CAPSTAN_SITE_DATABASE_ADMIN_URL, CAPSTAN_PREFIX)" ;;
    esac
done <"$ENV_FILE"

PREFIX=${PREFIX:-$FILE_PREFIX}
case "$PREFIX" in
    "") ;;
    /*[!A-Za-z0-9._/-]*|/*/) fail "the prefix must be an absolute path of letters, digits, . _ - and /, not ending in /" ;;
    /*) ;;
    *) fail "the prefix must be an absolute path" ;;
esac
if [ -z "$PREFIX" ] && [ "$(id -u)" -ne 0 ]; then
    fail "run as root (or give a prefix)"
fi
[ -n "$PLANE_URL" ] || fail "bootstrap.env gives no CAPSTAN_PLANE_URL"
[ -n "$NAME" ] || fail "bootstrap.env gives no CAPSTAN_NAME"
[ -n "$KIND" ] || fail "bootstrap.env gives no CAPSTAN_KIND"
case "$PLANE_URL" in
    https://?*|http://?*) ;;
    *) fail "CAPSTAN_PLANE_URL must be the management node's https:// URL" ;;
esac
case "$NAME" in
    [a-z0-9]*) ;;
    *) fail "CAPSTAN_NAME must start with a lower-case letter or a digit" ;;
esac
case "$NAME" in
    *[!a-z0-9._-]*) fail "CAPSTAN_NAME may hold only a-z 0-9 . _ -" ;;
esac
[ "${#NAME}" -le 64 ] || fail "CAPSTAN_NAME is longer than 64 characters"
case "$KIND" in
    agent|site) AGENT_NAME=$NAME ;;
    docker-host)
        [ "${#NAME}" -le 59 ] || fail "CAPSTAN_NAME of a docker-host is at most 59 characters (its agent joins as NAME-host)"
        AGENT_NAME=$NAME-host
        ;;
    *) fail "CAPSTAN_KIND must be agent, site or docker-host" ;;
esac
case "$LOCAL_ADDRESS" in
    *[!0-9A-Fa-f.:]*) fail "CAPSTAN_AGENT_LOCAL_ADDRESS must be an IP address" ;;
esac
ADMIN_URL=${CAPSTAN_SITE_DATABASE_ADMIN_URL:-$FILE_ADMIN_URL}

# --- supervision ---------------------------------------------------------------------------
cron_runs() {
    for comm in /proc/[0-9]*/comm; do
        name=$(cat "$comm" 2>/dev/null) || continue
        case "$name" in cron|crond|cronie) return 0 ;; esac
    done
    return 1
}
if [ -z "$SUPERVISION" ]; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        SUPERVISION=systemd
    elif cron_runs; then
        SUPERVISION=cron
    else
        SUPERVISION=process
    fi
fi
case "$SUPERVISION" in
    systemd)
        [ -f "$HERE/capstan-agent.service" ] || [ -f "$HERE/../systemd/capstan-agent.service" ] \
            || fail "systemd supervision needs capstan-agent.service beside bootstrap.sh"
        ;;
    cron)
        [ -f "$HERE/capstan-agent-supervise" ] \
            || fail "cron supervision needs capstan-agent-supervise beside bootstrap.sh"
        ;;
    process) ;;
    *) fail "CAPSTAN_SUPERVISION must be systemd, cron or process" ;;
esac
[ -f "$HERE/capstan-agent" ] || fail "no agent binary beside bootstrap.sh ($HERE/capstan-agent)"
[ -f "$HERE/install.sh" ] || fail "no install.sh beside bootstrap.sh"

STATE_DIR=$PREFIX/etc/capstan-agent
SITE_ROOT=$PREFIX/var/www/$NAME
CONTAINERS_DIR=$PREFIX/srv/capstan/containers
URL_FILE=$STATE_DIR/site-db.url
# The role and the database: site_NAME in PostgreSQL's safe characters, within its 63 bytes.
DATABASE=$(printf 'site_%s' "$NAME" | tr '.-' '__' | cut -c1-63)

echo "bootstrap: $KIND $NAME (agent $AGENT_NAME, supervision $SUPERVISION) joining $PLANE_URL"

# --- the site's database -------------------------------------------------------------------
admin_psql() {
    if [ -n "$ADMIN_URL" ]; then
        psql -X -q -v ON_ERROR_STOP=1 -d "$ADMIN_URL" "$@"
    else
        runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 "$@"
    fi
}

ensure_postgresql() {
    if [ -n "$ADMIN_URL" ]; then
        command -v psql >/dev/null 2>&1 \
            || fail "psql is not installed (the site's database is made with it)"
        return 0
    fi
    [ -z "$PREFIX" ] || fail "under --prefix, give CAPSTAN_SITE_DATABASE_ADMIN_URL"
    if ! id postgres >/dev/null 2>&1 || ! command -v psql >/dev/null 2>&1; then
        command -v apt-get >/dev/null 2>&1 \
            || fail "PostgreSQL is not installed and there is no apt-get to install it"
        echo "bootstrap: installing PostgreSQL"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql \
            || fail "apt-get could not install PostgreSQL"
    fi
}

# Where the site reaches PostgreSQL: the admin URL's host and port, else this machine's.
database_address() {
    rest=${ADMIN_URL#*://}
    rest=${rest%%/*}
    rest=${rest%%\?*}
    address=${rest##*@}
    case "$address" in
        "") address=127.0.0.1:5432 ;;
        *\]:*|[!\[]*:*) ;;
        *) address=$address:5432 ;;
    esac
    printf '%s' "$address"
}

# PV-02: what of the site is here already, said on stdout (status 0); 1 when nothing is;
# 2 when PostgreSQL cannot be asked.
site_exists() {
    for path in "$SITE_ROOT" "$STATE_DIR/site.json" "$URL_FILE"; do
        if [ -e "$path" ]; then
            echo "$path exists"
            return 0
        fi
    done
    if ! found=$(admin_psql -t -A -c "SELECT 'role' FROM pg_roles WHERE rolname = '$DATABASE' UNION ALL SELECT 'database' FROM pg_database WHERE datname = '$DATABASE'"); then
        echo "PostgreSQL cannot be asked whether $DATABASE exists (psql failed, above)"
        return 2
    fi
    if [ -n "$found" ]; then
        echo "PostgreSQL already has the $(echo "$found" | tr '\n' ' ')$DATABASE"
        return 0
    fi
    return 1
}

make_site() {
    umask 022
    # PV-04: the password is made here and written only to the URL file; it is never an
    # argument of a program (ps would show it) and never printed.
    password=$(LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 32)
    [ "${#password}" -eq 32 ] || fail "no password could be generated from /dev/urandom"
    admin_psql -c "CREATE ROLE \"$DATABASE\" LOGIN" \
        || fail "the role $DATABASE could not be made (psql, above)"
    admin_psql -c "CREATE DATABASE \"$DATABASE\" OWNER \"$DATABASE\"" \
        || fail "the database $DATABASE could not be made (psql, above)"
    # The statement carries the password: it goes on psql's standard input, its output is
    # withheld (an error would quote the statement), and the server is asked not to log it.
    if ! admin_psql >/dev/null 2>&1 <<SQL
\set ON_ERROR_STOP off
SET log_statement = 'none';
SET log_min_error_statement = 'panic';
\set ON_ERROR_STOP on
ALTER ROLE "$DATABASE" PASSWORD '$password';
SQL
    then
        fail "the password of the role $DATABASE could not be set (psql's output is withheld: it would show the password)"
    fi
    install -d -m 0700 "$STATE_DIR"
    umask 077
    printf 'postgres://%s:%s@%s/%s\n' "$DATABASE" "$password" "$(database_address)" "$DATABASE" >"$URL_FILE.new"
    password=""
    mv -f "$URL_FILE.new" "$URL_FILE"
    umask 022
    # docs/site-releases.md: releases/<version>/ land here, shared/ is linked into each, and
    # current is made by the first apply_update.
    mkdir -p "$SITE_ROOT/releases" "$SITE_ROOT/shared/logs"
    umask 077
    # site.json as the agent reads it (services/agent/src/domain/site.rs; docs/agent.md): the
    # paths the agent uses (under a prefix, the prefix's).
    printf '{"root": "%s",\n "database": {"url_file": "%s"}}\n' "$SITE_ROOT" "$URL_FILE" >"$STATE_DIR/site.json.new"
    mv -f "$STATE_DIR/site.json.new" "$STATE_DIR/site.json"
    echo "bootstrap: site $NAME laid out at $SITE_ROOT, database and role $DATABASE"
}

# --- the install ---------------------------------------------------------------------------
set -- --binary="$HERE/capstan-agent" --enable --management-node="$PLANE_URL" \
    --name="$AGENT_NAME" --supervision="$SUPERVISION"
[ -z "$PREFIX" ] || set -- "$@" --prefix="$PREFIX"
[ -z "$LOCAL_ADDRESS" ] || set -- "$@" --local-address="$LOCAL_ADDRESS"
case "$KIND" in
    site)
        ensure_postgresql
        exists=0
        why=$(site_exists) || exists=$?
        case "$exists" in
            0) fail "the site $NAME already exists on this machine ($why); clean the machine before a retry (PV-02)" ;;
            1) ;;
            *) fail "$why" ;;
        esac
        make_site
        set -- "$@" --site-root="$SITE_ROOT"
        ;;
    docker-host)
        umask 022
        install -d -m 0711 "$CONTAINERS_DIR"
        echo "bootstrap: room for containers at $CONTAINERS_DIR"
        set -- "$@" --siteless
        ;;
esac
sh "$HERE/install.sh" "$@" || fail "install.sh failed (exit $?)"

# --- the key the agent joins with (AC-10) ---------------------------------------------------
fingerprint=$("$PREFIX/usr/local/bin/capstan-agent" --state-dir="$STATE_DIR" status | sed -n 's/^fingerprint: //p')
case "$fingerprint" in
    SHA256:?*) ;;
    *) fail "the installed agent shows no key fingerprint (capstan-agent status)" ;;
esac
echo "CAPSTAN_AGENT_KEY=$fingerprint"
finished=yes
echo "bootstrap: installed $KIND $NAME (agent $AGENT_NAME, supervision $SUPERVISION)"

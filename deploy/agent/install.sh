#!/bin/sh
# Installs the Capstan node agent on this machine, as root:
#   the binary           /usr/local/bin/capstan-agent
#   the state directory  /etc/capstan-agent (0700), with agent.env written on first install only
#   supervision          the systemd unit when systemd runs (confined to what the words
#                        need: docs/agent-confinement.md); otherwise a cron keepalive
#                        (/etc/cron.d/capstan-agent: @reboot and once a minute, logging to
#                        /var/log/capstan-agent.log); or, asked for, a process started now
#
# Usage: install.sh [--binary=PATH] [--site-root=PATH | --siteless] [--enable]
#                   [--management-node=URL [--name=NAME]] [--local-address=IP]
#                   [--prefix=DIR] [--supervision=systemd|cron|process]
#   --enable            switch the agent on (it takes work once paired)
#   --management-node   ask that management node to admit this machine (prints the
#                       fingerprint to compare; the running agent finishes the join)
#   --siteless          a machine that holds no site (a Docker host's agent, PV-09): said
#                       explicitly, never inferred; refused beside --site-root or a site.json
#   --local-address     the local IP the agent's connections to the management node are made
#                       from (CAPSTAN_AGENT_LOCAL_ADDRESS in agent.env; the join's too)
#   --prefix            install the same files under DIR, a scratch root for trying them
#                       (tests): they name DIR's paths; root not needed; systemd and cron are
#                       not started (the process supervision is, and enable and join run)
#   --supervision       the supervision to install (default: systemd when it runs, else
#                       cron); process: no supervisor, the agent started now as a detached
#                       process of its own session (setsid; it outlives the login that ran
#                       this), output to /var/log/capstan-agent.log, its pid in the state
#                       directory's agent.pid: for a machine with neither systemd nor cron (a
#                       test's sshd in a namespace); nothing restarts it or starts it at boot
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
BINARY="$HERE/capstan-agent"
SITE_ROOT=""
ENABLE=no
MANAGEMENT_NODE=""
NAME=""
PREFIX=""
SUPERVISION=""
SITELESS=no
LOCAL_ADDRESS=""
for argument in "$@"; do
    case "$argument" in
        --binary=*) BINARY=${argument#--binary=} ;;
        --site-root=*) SITE_ROOT=${argument#--site-root=} ;;
        --enable) ENABLE=yes ;;
        --management-node=*) MANAGEMENT_NODE=${argument#--management-node=} ;;
        --name=*) NAME=${argument#--name=} ;;
        --prefix=*) PREFIX=${argument#--prefix=} ;;
        --siteless) SITELESS=yes ;;
        --local-address=*) LOCAL_ADDRESS=${argument#--local-address=} ;;
        --supervision=systemd|--supervision=cron|--supervision=process) SUPERVISION=${argument#--supervision=} ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $argument" >&2; exit 64 ;;
    esac
done

case "$PREFIX" in
    "") ;;
    /*[!A-Za-z0-9._/-]*|/*/) echo "install.sh: --prefix must be an absolute path of letters, digits, . _ - and /, not ending in /" >&2; exit 64 ;;
    /*) ;;
    *) echo "install.sh: --prefix must be an absolute path" >&2; exit 64 ;;
esac
if [ "$SITELESS" = yes ] && [ -n "$SITE_ROOT" ]; then
    echo "install.sh: --siteless and --site-root say opposite things; give one" >&2
    exit 64
fi
# The agent checks the address itself (CAPSTAN_AGENT_LOCAL_ADDRESS); here only that it is an
# address's characters, since it is written into agent.env, which the supervision sources.
case "$LOCAL_ADDRESS" in
    *[!0-9A-Fa-f.:]*) echo "install.sh: --local-address must be an IP address (digits, a-f, . and :)" >&2; exit 64 ;;
esac
if [ -z "$SUPERVISION" ]; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        SUPERVISION=systemd
    else
        SUPERVISION=cron
    fi
fi
# The installed unit and keepalive name the paths under the prefix (none: the paths as written).
at_prefix() {
    sed -e "s|/usr/local/bin|$PREFIX/usr/local/bin|g" \
        -e "s|/etc/capstan-agent|$PREFIX/etc/capstan-agent|g" \
        -e "s|/var/log/capstan-agent|$PREFIX/var/log/capstan-agent|g" "$1"
}
if [ -z "$PREFIX" ] && [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: run as root" >&2
    exit 1
fi
if [ ! -f "$BINARY" ]; then
    echo "install.sh: no agent binary at $BINARY (give --binary=PATH)" >&2
    exit 1
fi
if ! "$BINARY" --version >/dev/null 2>&1; then
    echo "install.sh: $BINARY does not run on this machine" >&2
    exit 1
fi

STATE_DIR=$PREFIX/etc/capstan-agent
BIN_DIR=$PREFIX/usr/local/bin
LOG=$PREFIX/var/log/capstan-agent.log
if [ "$SITELESS" = yes ] && [ -e "$STATE_DIR/site.json" ]; then
    echo "install.sh: --siteless, but $STATE_DIR/site.json describes a site on this machine" >&2
    exit 1
fi
# The installed agent with its agent.env's settings, as its supervision runs it.
installed_agent() {
    (
        set -a
        # shellcheck disable=SC1091 # written by this script
        . "$STATE_DIR/agent.env"
        set +a
        exec "$BIN_DIR/capstan-agent" --state-dir="$STATE_DIR" "$@"
    )
}
umask 022
# mkdir -p leaves an existing directory's mode and owner as they are.
mkdir -p "$BIN_DIR"
# Where a siteless machine's support bundle lands (the unit lets the agent write it).
mkdir -p "$PREFIX/opt/capstan-agent"
install -m 0755 "$BINARY" "$BIN_DIR/capstan-agent.new"
mv -f "$BIN_DIR/capstan-agent.new" "$BIN_DIR/capstan-agent"
if [ -n "$PREFIX" ]; then
    install -d -m 0700 "$STATE_DIR"
else
    install -d -m 0700 -o root -g root "$STATE_DIR"
fi
if [ ! -f "$STATE_DIR/agent.env" ]; then
    umask 077
    {
        echo "# Settings of capstan-agent (read by its unit or its cron keepalive)."
        if [ -n "$SITE_ROOT" ]; then
            echo "CAPSTAN_AGENT_SITE_ROOT=$SITE_ROOT"
        elif [ "$SITELESS" = yes ]; then
            echo "# Siteless: this machine holds no site (installed with --siteless)."
        else
            echo "# CAPSTAN_AGENT_SITE_ROOT=/var/www/site"
        fi
        if [ -n "$PREFIX" ]; then
            echo "CAPSTAN_AGENT_BUNDLE_DIR=$PREFIX/opt/capstan-agent/tree"
        fi
        echo "# The local IP the agent's connections to the management node are made from:"
        echo "# CAPSTAN_AGENT_LOCAL_ADDRESS=203.0.113.7"
        echo "# CAPSTAN_AGENT_LETSENCRYPT_DIR=/etc/letsencrypt/live"
        echo "# CAPSTAN_AGENT_POSTGRES=127.0.0.1:5432"
        echo "# The site's services, for the service_health recipe:"
        echo "# CAPSTAN_AGENT_WEB_UNIT=nginx"
        echo "# CAPSTAN_AGENT_APP_UNIT=php-fpm"
        echo "# CAPSTAN_AGENT_SITE_URL=http://127.0.0.1/"
        echo "# CAPSTAN_AGENT_SUPERVISORCTL=/usr/bin/supervisorctl"
        echo "# The mount point the site's data lives on (service_health repairs nothing while it is unmounted):"
        echo "# CAPSTAN_AGENT_DATA_ROOT=/srv/data"
        echo "# CAPSTAN_AGENT_LOG=info"
    } >"$STATE_DIR/agent.env"
fi
if [ -n "$LOCAL_ADDRESS" ]; then
    umask 077
    { grep -v '^CAPSTAN_AGENT_LOCAL_ADDRESS=' "$STATE_DIR/agent.env" || true
      echo "CAPSTAN_AGENT_LOCAL_ADDRESS=$LOCAL_ADDRESS"; } >"$STATE_DIR/agent.env.new"
    mv -f "$STATE_DIR/agent.env.new" "$STATE_DIR/agent.env"
fi

if [ "$SUPERVISION" = systemd ]; then
    UNIT="$HERE/../systemd/capstan-agent.service"
    [ -f "$UNIT" ] || UNIT="$HERE/capstan-agent.service"
    umask 022
    mkdir -p "$PREFIX/etc/systemd/system"
    at_prefix "$UNIT" >"$PREFIX/etc/systemd/system/capstan-agent.service"
    chmod 0644 "$PREFIX/etc/systemd/system/capstan-agent.service"
    rm -f "$PREFIX/etc/cron.d/capstan-agent"
    if [ -n "$PREFIX" ]; then
        echo "supervision: systemd, installed under $PREFIX (not started)"
    else
        systemctl daemon-reload
        systemctl enable capstan-agent.service
        systemctl restart capstan-agent.service
        echo "supervision: systemd (systemctl status capstan-agent; journalctl -u capstan-agent)"
    fi
elif [ "$SUPERVISION" = process ]; then
    umask 022
    mkdir -p "$PREFIX/var/log"
    if installed_agent status 2>/dev/null | grep -q '^agent: running'; then
        echo "supervision: process, the agent already runs"
    else
        # Its own session (setsid): no terminal or login session's end reaches it; every
        # descriptor is the log's or /dev/null, so the login that ran this can close.
        umask 077
        (
            set -a
            # shellcheck disable=SC1091 # written by this script
            . "$STATE_DIR/agent.env"
            set +a
            exec setsid "$BIN_DIR/capstan-agent" --state-dir="$STATE_DIR" run
        ) >>"$LOG" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$STATE_DIR/agent.pid"
        started=no
        # Up to a minute while it lives: a busy machine (many installs at once) starts it
        # slowly; one that exits (a bad setting) is said at once.
        for _ in $(seq 1 600); do
            if installed_agent status 2>/dev/null | grep -q '^agent: running'; then
                started=yes
                break
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if [ "$started" = no ]; then
            echo "install.sh: the agent did not start; the end of $LOG:" >&2
            tail -n 5 "$LOG" >&2 || true
            exit 1
        fi
        echo "supervision: process $pid started (tail -f $LOG); nothing restarts it"
    fi
else
    umask 022
    at_prefix "$HERE/capstan-agent-supervise" >"$BIN_DIR/capstan-agent-supervise"
    chmod 0755 "$BIN_DIR/capstan-agent-supervise"
    mkdir -p "$PREFIX/etc/cron.d" "$PREFIX/var/log"
    cat >"$PREFIX/etc/cron.d/capstan-agent" <<CRON
# Keeps capstan-agent running where systemd does not (installed by install.sh).
@reboot root $BIN_DIR/capstan-agent-supervise
* * * * * root $BIN_DIR/capstan-agent-supervise
CRON
    chmod 0644 "$PREFIX/etc/cron.d/capstan-agent"
    if [ -n "$PREFIX" ]; then
        echo "supervision: cron keepalive, installed under $PREFIX (not started)"
    else
        /usr/local/bin/capstan-agent-supervise
        echo "supervision: cron keepalive (tail -f /var/log/capstan-agent.log)"
    fi
fi

if [ "$ENABLE" = yes ]; then
    installed_agent enable
fi
# The join reads agent.env as the running agent does: the site root it names and the local
# address it connects from (the plane sees the join come from there).
if [ -n "$MANAGEMENT_NODE" ]; then
    if [ -n "$NAME" ]; then
        installed_agent join --management-node="$MANAGEMENT_NODE" --name="$NAME" --no-wait
    else
        installed_agent join --management-node="$MANAGEMENT_NODE" --no-wait
    fi
fi

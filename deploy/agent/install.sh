#!/bin/sh
# Installs the Capstan node agent on this machine, as root:
#   the binary           /usr/local/bin/capstan-agent
#   the state directory  /etc/capstan-agent (0700), with agent.env written on first install only
#   supervision          the systemd unit when systemd runs (confined to what the words
#                        need: docs/agent-confinement.md); otherwise a cron keepalive
#                        (/etc/cron.d/capstan-agent: @reboot and once a minute, logging to
#                        /var/log/capstan-agent.log)
#
# Usage: install.sh [--binary=PATH] [--site-root=PATH] [--enable]
#                   [--management-node=URL [--name=NAME]]
#   --enable            switch the agent on (it takes work once paired)
#   --management-node   ask that management node to admit this machine (prints the
#                       fingerprint to compare; the running agent finishes the join)
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
BINARY="$HERE/capstan-agent"
SITE_ROOT=""
ENABLE=no
MANAGEMENT_NODE=""
NAME=""
for argument in "$@"; do
    case "$argument" in
        --binary=*) BINARY=${argument#--binary=} ;;
        --site-root=*) SITE_ROOT=${argument#--site-root=} ;;
        --enable) ENABLE=yes ;;
        --management-node=*) MANAGEMENT_NODE=${argument#--management-node=} ;;
        --name=*) NAME=${argument#--name=} ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $argument" >&2; exit 64 ;;
    esac
done

if [ "$(id -u)" -ne 0 ]; then
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

STATE_DIR=/etc/capstan-agent
install -m 0755 "$BINARY" /usr/local/bin/capstan-agent.new
mv -f /usr/local/bin/capstan-agent.new /usr/local/bin/capstan-agent
install -d -m 0700 -o root -g root "$STATE_DIR"
if [ ! -f "$STATE_DIR/agent.env" ]; then
    umask 077
    {
        echo "# Settings of capstan-agent (read by its unit or its cron keepalive)."
        if [ -n "$SITE_ROOT" ]; then
            echo "CAPSTAN_AGENT_SITE_ROOT=$SITE_ROOT"
        else
            echo "# CAPSTAN_AGENT_SITE_ROOT=/var/www/site"
        fi
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

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    install -m 0644 "$HERE/../systemd/capstan-agent.service" /etc/systemd/system/capstan-agent.service 2>/dev/null \
        || install -m 0644 "$HERE/capstan-agent.service" /etc/systemd/system/capstan-agent.service
    rm -f /etc/cron.d/capstan-agent
    systemctl daemon-reload
    systemctl enable capstan-agent.service
    systemctl restart capstan-agent.service
    echo "supervision: systemd (systemctl status capstan-agent; journalctl -u capstan-agent)"
else
    install -m 0755 "$HERE/capstan-agent-supervise" /usr/local/bin/capstan-agent-supervise
    umask 022
    cat >/etc/cron.d/capstan-agent <<'CRON'
# Keeps capstan-agent running where systemd does not (installed by install.sh).
@reboot root /usr/local/bin/capstan-agent-supervise
* * * * * root /usr/local/bin/capstan-agent-supervise
CRON
    chmod 0644 /etc/cron.d/capstan-agent
    /usr/local/bin/capstan-agent-supervise
    echo "supervision: cron keepalive (tail -f /var/log/capstan-agent.log)"
fi

if [ "$ENABLE" = yes ]; then
    /usr/local/bin/capstan-agent --state-dir="$STATE_DIR" enable
fi
if [ -n "$MANAGEMENT_NODE" ]; then
    if [ -n "$NAME" ]; then
        /usr/local/bin/capstan-agent --state-dir="$STATE_DIR" join --management-node="$MANAGEMENT_NODE" --name="$NAME" --no-wait
    else
        /usr/local/bin/capstan-agent --state-dir="$STATE_DIR" join --management-node="$MANAGEMENT_NODE" --no-wait
    fi
fi

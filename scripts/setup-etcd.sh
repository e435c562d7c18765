#!/usr/bin/env bash
# Make a real etcd (server and etcdctl) available for the audit tests: Debian's etcd-server and
# etcd-client, installed with apt-get when 'etcd' is missing and we are root. Idempotent, quiet on success.
# The tests start their own etcd on loopback; the packaged service is neither needed nor started.
set -euo pipefail
if command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
    exit 0
fi
. "$(dirname "$0")/apt-install.sh"
apt_install setup-etcd etcd "put etcd 3.4+ on PATH so that 'etcd' and 'etcdctl' are there" etcd-server etcd-client
command -v etcd >/dev/null 2>&1 || { echo "setup-etcd: etcd still not on PATH after installing etcd-server" >&2; exit 1; }

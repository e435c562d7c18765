#!/usr/bin/env bash
# Make a real etcd (server and etcdctl) available for the audit tests: Debian's etcd-server and
# etcd-client, installed with apt-get when 'etcd' is missing and we are root. Idempotent, quiet on success.
# The tests start their own etcd on loopback; the packaged service is neither needed nor started.
set -euo pipefail
if command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup-etcd: etcd is missing; install etcd-server and etcd-client (apt-get, as root) or put etcd 3.4+ on PATH" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-etcd: etcd is missing and this system has no apt-get; install etcd 3.4+ so that 'etcd' and 'etcdctl' are on PATH" >&2
    exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# policy-rc.d keeps the package from starting a system etcd on the default ports.
policy=/usr/sbin/policy-rc.d
created_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
fi
if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server etcd-client >"$log" 2>&1 \
       || { apt-get update -q >>"$log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server etcd-client >>"$log" 2>&1; }; }; then
    [ -n "$created_policy" ] && rm -f "$policy"
    echo "setup-etcd: apt-get install etcd-server etcd-client failed:" >&2
    tail -20 "$log" >&2
    exit 1
fi
[ -n "$created_policy" ] && rm -f "$policy"
command -v etcd >/dev/null 2>&1 || { echo "setup-etcd: etcd still not on PATH after installing etcd-server" >&2; exit 1; }

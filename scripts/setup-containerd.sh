#!/usr/bin/env bash
# Make containerd, its ctr client and runc available for the kubeadm control-plane test
# (tests/integration/test_real_kubeadm.py): Debian's containerd and runc, installed with apt-get when
# 'containerd' is missing and we are root; and gcc with the C library's static archive (gcc, libc6-dev), which
# the test builds the pause image's program with. Idempotent, quiet on success.
# The test starts its own containerd on a private socket, root and state directory; the packaged
# service is neither needed nor started.
set -euo pipefail
packages="containerd runc"
if command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 && command -v runc >/dev/null 2>&1; then
    packages=""
fi
if ! command -v gcc >/dev/null 2>&1 || { [ ! -e /usr/lib/x86_64-linux-gnu/libc.a ] && [ ! -e /usr/lib/libc.a ]; }; then
    packages="$packages gcc libc6-dev"
fi
[ -n "$packages" ] || exit 0
if [ "$(id -u)" != 0 ]; then
    echo "setup-containerd: containerd is missing; install containerd and runc (apt-get, as root) so that 'containerd', 'ctr' and 'runc' are on PATH" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-containerd: containerd is missing and this system has no apt-get; install containerd 1.6+ and runc so that 'containerd', 'ctr' and 'runc' are on PATH" >&2
    exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# policy-rc.d keeps the package from starting a system containerd on the default socket.
policy=/usr/sbin/policy-rc.d
created_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
fi
if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q $packages >"$log" 2>&1 \
       || { apt-get update -q >>"$log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $packages >>"$log" 2>&1; }; }; then
    [ -n "$created_policy" ] && rm -f "$policy"
    echo "setup-containerd: apt-get install$packages failed:" >&2
    tail -20 "$log" >&2
    exit 1
fi
[ -n "$created_policy" ] && rm -f "$policy"
for tool in containerd ctr runc gcc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "setup-containerd: $tool still not on PATH after installing$packages" >&2; exit 1; }
done

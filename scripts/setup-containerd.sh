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
. "$(dirname "$0")/apt-install.sh"
# shellcheck disable=SC2086  # the package names, one word each
apt_install setup-containerd containerd "install containerd 1.6+, runc and gcc so that 'containerd', 'ctr', 'runc' and 'gcc' are on PATH" $packages
for tool in containerd ctr runc gcc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "setup-containerd: $tool still not on PATH after installing$packages" >&2; exit 1; }
done

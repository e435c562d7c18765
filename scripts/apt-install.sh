# Sourced by setup-etcd.sh and setup-containerd.sh: one way to install the Debian packages a test needs.
# apt_install WHO WHAT ELSE PACKAGE...: install PACKAGE... with apt-get, as root, starting no service of theirs
# (policy-rc.d while apt-get runs), quiet on success. WHO prefixes every message; WHAT is what is missing; ELSE is
# how to provide it without apt-get. Returns non-zero, with the end of apt-get's output, when it cannot.
apt_install() {
    local who=$1 what=$2 else=$3
    shift 3
    if [ "$(id -u)" != 0 ]; then
        echo "$who: $what is missing; install $* (apt-get, as root), or $else" >&2
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$who: $what is missing and this system has no apt-get; $else" >&2
        return 1
    fi
    local log policy=/usr/sbin/policy-rc.d created_policy="" rc=0
    log=$(mktemp)
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
    fi
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >"$log" 2>&1 \
           || { apt-get update -q >>"$log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >>"$log" 2>&1; }; }; then
        echo "$who: apt-get install $* failed:" >&2
        tail -20 "$log" >&2
        rc=1
    fi
    [ -z "$created_policy" ] || rm -f "$policy"
    rm -f "$log"
    return "$rc"
}

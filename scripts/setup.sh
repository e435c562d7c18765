#!/usr/bin/env bash
# Create (or refresh) the project virtualenv .venv with the newest Python on this machine and the
# pinned tools from test-requirements.txt. Idempotent: does nothing when .venv is current.
set -euo pipefail
cd "$(dirname "$0")/.."

newest_python() {
    local candidates=() v
    for v in python3.14 python3.13 python3.12; do
        command -v "$v" >/dev/null 2>&1 && candidates+=("$(command -v "$v")")
    done
    local root="${PYENV_ROOT:-$HOME/.pyenv}"
    for v in "$root"/versions/3.1[2-9]*/bin/python3; do
        [ -x "$v" ] && candidates+=("$v")
    done
    candidates+=("$(command -v python3)")
    local best="" best_version=0 p pv
    for p in "${candidates[@]}"; do
        pv=$("$p" -c 'import sys; print(sys.version_info[0]*100 + sys.version_info[1])' 2>/dev/null) || continue
        if [ "$pv" -gt "$best_version" ]; then best="$p"; best_version="$pv"; fi
    done
    echo "$best"
}

PY=$(newest_python)
[ -n "$PY" ] || { echo "setup: no python3 found" >&2; exit 1; }
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    echo "setup: the pinned ansible-core 2.21 needs Python 3.12 or newer; the newest found is $("$PY" --version)." >&2
    echo "setup: install one (for example 'pyenv install 3.13') and run this again." >&2
    exit 1
fi
stamp=".venv/.requirements-$(sha256sum test-requirements.txt | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "setup: creating .venv with $PY ($("$PY" --version))"
    rm -rf .venv
    "$PY" -m venv .venv
    if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip \
           && .venv/bin/python -m pip install --disable-pip-version-check -r test-requirements.txt; } > .venv-install.log 2>&1; then
        grep -v "^WARNING: Location" .venv-install.log | tail -30 >&2
        echo "setup: installing test-requirements.txt failed (full log: .venv-install.log)" >&2
        exit 1
    fi
    mv .venv-install.log .venv/install.log
    touch "$stamp"
fi

# ansible-test bootstraps every venv it makes by downloading get-pip.py from a host these machines
# cannot reach; it uses a cached copy first, so provide one that installs pip from the stdlib.
cache="$HOME/.ansible/test/cache"
mkdir -p "$cache"
for v in 24_2 25_2 25_3; do
    cat > "$cache/get_pip_$v.py" <<'PYEOF'
import subprocess, sys
args = [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]
subprocess.check_call([sys.executable, '-m', 'ensurepip', '--upgrade'])
subprocess.check_call([sys.executable, '-m', 'pip', 'install', '--disable-pip-version-check'] + args)
PYEOF
done

# The collection as Ansible sees it: ansible_collections/kubeupgrade/storage -> this checkout.
mkdir -p collections/ansible_collections/kubeupgrade
link=collections/ansible_collections/kubeupgrade/storage
[ -L "$link" ] || rm -rf "$link"  # pytest-ansible may have made a directory of per-entry links
ln -sfn "$(pwd)" "$link"
echo "setup: ready ($(.venv/bin/python --version), $(.venv/bin/ansible --version | head -1))"

#!/usr/bin/env bash
# Create (or refresh) the project virtualenv with the newest Python on this machine and the pinned
# tools for the newest ansible-core that Python can run. Idempotent: does nothing when it is current.
#
#   Python 3.12+  -> test-requirements.txt       (ansible-core 2.21)
#   Python 3.11   -> test-requirements-2.19.txt  (ansible-core 2.19, stock Debian 12)
#
# Environment (all optional):
#   KUBEUPGRADE_PYTHON    the interpreter to use instead of the newest one found
#   KUBEUPGRADE_VENV_DIR  the virtualenv directory (default .venv)
#   KUBEUPGRADE_VENV      an existing virtualenv to reuse when it holds exactly the pinned tools
#                         (linked as the virtualenv directory; rebuilt in place when it does not)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${KUBEUPGRADE_VENV_DIR:-.venv}"

# Where pyenv may keep interpreters: $PYENV_ROOT, ~/.pyenv, and the account's real home directory
# (HOME may be a fresh directory, e.g. in CI or in the tests), then /root/.pyenv as a last resort.
pyenv_roots() {
    local account_home
    account_home=$(getent passwd "$(id -un)" 2>/dev/null | cut -d: -f6) || account_home=""
    printf '%s\n' "${PYENV_ROOT:-}" "$HOME/.pyenv" "${account_home:+$account_home/.pyenv}" /root/.pyenv \
        | awk 'NF && !seen[$0]++'
}

python_version() {  # 311 for Python 3.11; fails for anything that does not run
    "$1" -c 'import sys; print(sys.version_info[0]*100 + sys.version_info[1])' 2>/dev/null
}

newest_python() {
    local candidates=() v root p
    for v in python3.14 python3.13 python3.12 python3.11 python3; do
        command -v "$v" >/dev/null 2>&1 || continue
        p=$(command -v "$v")
        # a virtualenv's python on PATH (this one's, when it is activated) stands for the base interpreter it links
        # to, which survives the virtualenv being made again; any other is kept as named (a versioned path behind it
        # can change with an upgrade)
        [ -e "$(dirname "$p")/../pyvenv.cfg" ] && p=$(realpath "$p")
        candidates+=("$p")
    done
    while read -r root; do
        for v in "$root"/versions/3.1[1-9]*/bin/python3; do
            [ -x "$v" ] && candidates+=("$v")
        done
    done < <(pyenv_roots)
    for v in /usr/bin/python3.1[1-9] /usr/local/bin/python3.1[1-9]; do
        [ -x "$v" ] && candidates+=("$v")
    done
    local best="" best_version=0 p pv
    for p in "${candidates[@]}"; do
        pv=$(python_version "$p") || continue  # e.g. a pyenv shim that cannot find its root
        [ -n "$pv" ] || continue
        if [ "$pv" -gt "$best_version" ]; then best="$p"; best_version="$pv"; fi
    done
    echo "$best"
}

PY="${KUBEUPGRADE_PYTHON:-$(newest_python)}"
[ -n "$PY" ] || { echo "setup: no python3 found; install Python 3.11 or newer (Debian 12: apt-get install python3 python3-venv)" >&2; exit 1; }
PV=$(python_version "$PY") || { echo "setup: $PY does not run" >&2; exit 1; }
if [ "$PV" -ge 312 ]; then
    REQUIREMENTS=test-requirements.txt
elif [ "$PV" -ge 311 ]; then
    REQUIREMENTS=test-requirements-2.19.txt
else
    echo "setup: ansible-core 2.19+ needs Python 3.11 or newer; the newest found is $("$PY" --version 2>&1)." >&2
    echo "setup: install one (Debian 12's python3 is 3.11; or 'pyenv install 3.13') and run this again." >&2
    exit 1
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "setup: $PY cannot create virtualenvs; on Debian/Ubuntu: apt-get install python3-venv" >&2
    exit 1
fi

if [ -n "${KUBEUPGRADE_VENV:-}" ] && [ ! -e "$VENV" ] && [ "$(realpath -m "$KUBEUPGRADE_VENV")" != "$(realpath -m "$VENV")" ]; then
    ln -s "$(realpath "$KUBEUPGRADE_VENV")" "$VENV"
fi
# uv (from PyPI, into the virtualenv) installs the pinned tools in about 17 s where pip takes about 47 s on
# the 2-core machine; it compiles the bytecode as pip does. pip is the fallback when uv cannot be had.
UV_VERSION=0.13.9
install_with_uv() {
    "$VENV/bin/python" -m pip install --disable-pip-version-check "uv==$UV_VERSION" \
        && "$VENV/bin/uv" pip install --python "$VENV/bin/python" --compile-bytecode -r "$REQUIREMENTS"
}
install_with_pip() {
    echo "setup: uv could not install $REQUIREMENTS; installing with pip"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip \
        && "$VENV/bin/python" -m pip install --disable-pip-version-check -r "$REQUIREMENTS"
}
stamp="$VENV/.requirements-$(cat "$REQUIREMENTS" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(python_version "$VENV/bin/python" || echo 0)" != "$PV" ]; then
    echo "setup: creating $VENV with $PY ($("$PY" --version 2>&1)) and $REQUIREMENTS"
    rm -rf "$VENV"  # a link to a reused virtualenv is removed, not what it points to
    "$PY" -m venv "$VENV"
    if ! install_with_uv > "$VENV.install.log" 2>&1 && ! install_with_pip >> "$VENV.install.log" 2>&1; then
        grep -v "^WARNING: Location" "$VENV.install.log" | tail -30 >&2
        echo "setup: installing $REQUIREMENTS failed (full log: $VENV.install.log)" >&2
        exit 1
    fi
    mv "$VENV.install.log" "$VENV/install.log"
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
# Read the whole version text (no "| head -1": ansible prints a BrokenPipeError when head exits).
ansible_version=$("$VENV/bin/ansible" --version 2>/dev/null) || ansible_version="ansible --version failed"
echo "setup: ready in $VENV ($("$VENV/bin/python" --version), ${ansible_version%%$'\n'*})"

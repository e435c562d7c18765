#!/usr/bin/env bash
# The one test command: everything CI runs. Exits non-zero if any step fails.
#   scripts/test.sh            all steps
#   scripts/test.sh pytest     one step (lint, changelog, pytest, pytest-real-cluster, pytest-oldest,
#                              ansible-lint, sanity, docs)
# With all steps, the CPU-bound checks (sanity, ansible-lint, docs, pytest-oldest) run one after the
# other in the background while pytest runs: pytest mostly waits on simulated apiservers and polls.
# KUBEUPGRADE_TEST_SERIAL=1 runs every step in the foreground.
# Each step's whole output is kept in tests/output/<step>.log (ignored by git and by the collection
# build). The terminal shows pytest's progress, one line per step, and for a failed step what failed
# (pytest's FAILED/ERROR lines, or the end of the step's log), repeated at the very end.
# KUBEUPGRADE_TEST_WORKERS sets pytest's worker count (default: one per CPU, plus one for the main
# pytest step, whose playbook tests wait on polls and simulated apiservers part of their time).
set -uo pipefail
cd "$(dirname "$0")/.."
ALL_STEPS=(lint changelog pytest pytest-real-cluster pytest-oldest ansible-lint sanity docs)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=("${ALL_STEPS[@]}")
for step in "${steps[@]}"; do  # a name that is no step (a pytest option, a typo) stops here, before anything runs
    case " ${ALL_STEPS[*]} " in
        *" $step "*) ;;
        *) echo "scripts/test.sh: '$step' is not a step; the steps are: ${ALL_STEPS[*]} (options for pytest: run it directly)"; exit 2 ;;
    esac
done
bash scripts/setup.sh || exit 1
ROOT=$(pwd)
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$ROOT/collections"
export ANSIBLE_NOCOLOR=1 PY_COLORS=0
# The playbook tests run modules on the local connection: pipelining saves the temporary files and
# shell calls of every task.
export ANSIBLE_PIPELINING=1
# The modules keep their compiled module_utils between tasks (module_utils/_bytecode.py), as on an operator's host: a
# PYTHONDONTWRITEBYTECODE inherited from the machine would have every task of every test compile them again.
unset PYTHONDONTWRITEBYTECODE
PYVER=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kubeupgrade-storage-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT="$ROOT/tests/output"
mkdir -p "$OUT"
exec 3>&1  # the terminal: pytest's live progress goes here, everything else into the step's log

step_lint() { ruff check --output-format concise .; }

step_changelog() { antsibull-changelog lint; }

# pytest's closing line ("N passed, M skipped in 301.2s (0:05:01)"; -q prints it without "=" borders),
# kept in tests/output/<step>-summary.txt for CI to show.
SUMMARY_RE='^(=+ )?[0-9]+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed)|^(=+ )?no tests ran'
pytest_summary() {
    grep -E "$SUMMARY_RE" "$OUT/$1.log" | tail -1 | sed -E 's/^=+ //; s/ =+$//' > "$OUT/$1-summary.txt"
}

# What a person watching sees of a pytest run: its progress lines, its FAILED/ERROR lines, its closing line.
progress() { grep --line-buffered -E "^[.sxXFE]+ *\[ *[0-9]+%\]\$|^(FAILED|ERROR) |$SUMMARY_RE" >&3 || true; }

# pytest's output: appended to the step's log (opened by run_step), its progress shown live.
run_pytest() {
    local step=$1; shift
    # CI=1: pytest does not cut the FAILED lines' messages (nor assertion diffs) to the terminal's width
    CI=1 "$@" 2>&1 | tee -a "$OUT/$step.log" | progress
    local rc=${PIPESTATUS[0]}
    pytest_summary "$step"
    return "$rc"
}

step_pytest() {
    # worksteal: an idle worker takes queued tests from a busy one, so that the run does not end on one worker;
    # the tests are dealt out to the workers in turn, the longest scenario tests first (see tests/conftest.py).
    # Every test's seconds go to tests/output/pytest-junit.xml (the suite's time is spent there, not guessed).
    run_pytest pytest python -m pytest tests -q -n "${KUBEUPGRADE_TEST_WORKERS:-$(($(nproc) + 1))}" --dist worksteal \
        --durations=10 --junitxml="$OUT/pytest-junit.xml" "$@"
}

# Real-cluster mode (KUBEUPGRADE_TEST_KUBECONFIG), tested against a simulated control plane reached only
# through a kubeconfig: the tests that need the simulator's admin interface must skip, the others pass.
step_pytest_real_cluster() {
    local state="$WORK/real-cluster" pid rc
    mkdir -p "$state"
    PYTHONPATH="$ROOT/tests/simulator" python -m apisim --apiservers 3 --release 1.32 --state-dir "$state" \
        > "$state/apisim.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
        [ -s "$state/control-plane.json" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$state/apisim.log"; return 1; }
        sleep 0.1
    done
    KUBEUPGRADE_TEST_KUBECONFIG=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["kubeconfig"])' "$state/control-plane.json") \
    KUBEUPGRADE_TEST_ENDPOINTS=$(python -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))["endpoints"]))' "$state/control-plane.json") \
        run_pytest pytest-real-cluster python -m pytest tests/integration -q -rfEs -n "${KUBEUPGRADE_TEST_WORKERS:-auto}" "$@"
    rc=$?
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    return "$rc"
}

# The oldest supported ansible-core (2.19, on Python 3.11 as on stock Debian 12): the unit, simulator
# and module tests in a second virtualenv, .venv-2.19. KUBEUPGRADE_TEST_COVERAGE=1 reports the coverage of
# module_utils there (Python 3.11's tracer doubles the unit tests' CPU time: off by default, CI runs near its limit).
step_pytest_oldest() {
    local py="" candidate cov=()
    for candidate in "$(command -v python3.11 || true)" /usr/bin/python3.11 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11*/bin/python3 /root/.pyenv/versions/3.11*/bin/python3; do
        if [ -n "$candidate" ] && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            py=$candidate; break
        fi
    done
    [ -n "$py" ] || { echo "pytest-oldest: needs Python 3.11 (Debian 12: apt-get install python3 python3-venv)"; return 1; }
    KUBEUPGRADE_PYTHON="$py" KUBEUPGRADE_VENV_DIR=.venv-2.19 bash scripts/setup.sh || return 1
    [ "${KUBEUPGRADE_TEST_COVERAGE:-0}" != 1 ] || \
        cov=(--cov=ansible_collections.kubeupgrade.storage.plugins.module_utils --cov-report=term:skip-covered)
    # The generated protobuf code's check (a virtualenv with grpcio-tools, two minutes) depends on no ansible-core: once, in pytest.
    PATH="$ROOT/.venv-2.19/bin:$PATH" run_pytest pytest-oldest .venv-2.19/bin/python -m pytest tests/unit tests/simulator \
        tests/integration/test_modules_observe.py tests/integration/test_migration.py \
        --deselect tests/unit/plugins/module_utils/etcd/test_etcd_protos.py::test_the_committed_files_are_a_fresh_generation \
        -q -n "${KUBEUPGRADE_TEST_WORKERS:-auto}" "${cov[@]}" "$@"
}

step_ansible_lint() { ansible-lint --profile production --offline -q; }

# ansible-test needs the collection under ansible_collections/<ns>/<name>, outside this git
# checkout (it would otherwise read the parent repository's ignore rules): copy what git tracks.
collection_tree() {
    local tree="$WORK/tree/ansible_collections/kubeupgrade/storage"
    mkdir -p "$tree"
    git ls-files -co --exclude-standard | tar -cf - --ignore-failed-read -T - 2>/dev/null | tar -xf - -C "$tree"
    echo "$tree"
}

step_sanity() {
    local tree; tree=$(collection_tree)
    (cd "$tree" && ansible-test sanity --venv --python "$PYVER" --color no)
}

step_docs() {
    ansible-galaxy collection build --force --output-path "$WORK/dist" . >/dev/null || return 1
    ANSIBLE_COLLECTIONS_PATH="$WORK/installed" ansible-galaxy collection install --offline --force -p "$WORK/installed" "$WORK"/dist/*.tar.gz >/dev/null || return 1
    local path="$WORK/installed" failed=0 name count=0 kind header
    local modules=() filters=() roles=()
    for module in plugins/modules/*.py; do modules+=("$(basename "$module" .py)"); done
    mapfile -t filters < <(PYTHONPATH="$path" python - <<'PYEOF'
import importlib, pathlib
for path in sorted(pathlib.Path("plugins/filter").glob("*.py")):
    mod = importlib.import_module(f"ansible_collections.kubeupgrade.storage.plugins.filter.{path.stem}")
    print("\n".join(sorted(mod.FilterModule().filters())))
PYEOF
    ) || { echo "docs: cannot list the filter plugins"; return 1; }
    for role in roles/*/; do roles+=("$(basename "$role")"); done
    # One ansible-doc per plugin type (each start loads every collection), then each name's own header.
    for kind in module filter role; do
        local -n names="${kind}s"
        ANSIBLE_COLLECTIONS_PATH="$path" ansible-doc -t "$kind" "${names[@]/#/kubeupgrade.storage.}" > "$WORK/doc-$kind.txt" 2>&1 \
            || { echo "docs: ansible-doc -t $kind failed:"; cat "$WORK/doc-$kind.txt"; failed=1; }
        # ansible-core warns about its own internal collection when listing roles: only plugin docs must be clean.
        if [ "$kind" != role ] && grep -qE "WARNING|ERROR" "$WORK/doc-$kind.txt"; then
            echo "docs: ansible-doc -t $kind warned:"; grep -E "WARNING|ERROR" "$WORK/doc-$kind.txt"; failed=1
        fi
        for name in "${names[@]}"; do
            header="^> ${kind^^}:? \*?kubeupgrade\.storage\.$name\b"
            grep -qE "$header" "$WORK/doc-$kind.txt" || { echo "docs: $kind $name does not render"; failed=1; }
            count=$((count + 1))
        done
        unset -n names
    done
    echo "docs: rendered $count modules, filters and roles from the built collection"
    # The docs site (docs/docsite: extra-docs.yml and rst/) and the plugin docs, as docs.ansible.com builds them.
    (cd "$path/ansible_collections/kubeupgrade/storage" \
        && ANSIBLE_COLLECTIONS_PATH="$path" antsibull-docs lint-collection-docs --plugin-docs --validate-collection-refs=self .) \
        && echo "docs: antsibull-docs lint-collection-docs passed" || { echo "docs: antsibull-docs lint-collection-docs failed"; failed=1; }
    return $failed
}

# What failed in a step, from its log: pytest's FAILED/ERROR lines, where they were raised and its closing line, or the log's end.
failure_excerpt() {
    local step=$1 log="$OUT/$1.log"
    echo "--- $step failed; its whole output: tests/output/$step.log"
    if grep -qE '^(FAILED|ERROR) ' "$log"; then
        grep -E '^(FAILED|ERROR) ' "$log" | cut -c1-400 | head -40
        # where each failure was raised: pytest's "path.py:LINE: ErrorType" lines
        grep -E '^[^ ]+\.py:[0-9]+: [A-Za-z]+' "$log" | cut -c1-200 | head -20
        grep -E "$SUMMARY_RE" "$log" | tail -1
    else
        tail -25 "$log"
    fi
}

run_step() {
    local step=$1 start=$SECONDS
    rm -f "$OUT/$step-summary.txt"
    : > "$OUT/$step.log"
    if "step_${step//-/_}" >> "$OUT/$step.log" 2>&1; then
        echo "=== $step: ok ($((SECONDS - start)) s)$(summary_of "$step")"
    else
        echo "=== $step: FAILED ($((SECONDS - start)) s)$(summary_of "$step")"
        failure_excerpt "$step"
        return 1
    fi
}

summary_of() { [ ! -s "$OUT/$1-summary.txt" ] || echo ": $(cat "$OUT/$1-summary.txt")"; }

foreground=() background=()
for step in "${steps[@]}"; do
    case "$step" in
        pytest-oldest|ansible-lint|sanity|docs)
            if [ ${#steps[@]} -gt 1 ] && [ "${KUBEUPGRADE_TEST_SERIAL:-0}" != 1 ]; then background+=("$step"); continue; fi ;;
    esac
    foreground+=("$step")
done

start=$SECONDS
failed=()
bg_pid=""
# The etcd tests (audit, the simulator's etcd mirror) run in pytest and pytest-oldest, beside each other:
# etcd is installed once, before either starts, and within these steps a missing etcd fails the test.
case " ${steps[*]} " in
    *" pytest "*|*" pytest-oldest "*)
        bash scripts/setup-etcd.sh || { echo "FAILED: etcd could not be installed (scripts/setup-etcd.sh, above)"; exit 1; }
        export KUBEUPGRADE_TEST_REQUIRE_ETCD=1 ;;
esac
# The kubeadm control-plane test (tests/integration/test_real_kubeadm.py) runs containerd: installed once, before pytest.
case " ${steps[*]} " in
    *" pytest "*)
        bash scripts/setup-containerd.sh || { echo "FAILED: containerd could not be installed (scripts/setup-containerd.sh, above)"; exit 1; }
        export KUBEUPGRADE_TEST_REQUIRE_CONTAINERD=1 ;;
esac
if [ ${#background[@]} -gt 0 ]; then
    echo "=== in the background while the other steps run: ${background[*]} (their lines follow pytest's)"
    (
        exec 3>/dev/null  # no live progress from the background
        for step in "${background[@]}"; do
            run_step "$step" > "$WORK/step-$step.status" 2>&1 || touch "$WORK/step-$step.failed"
        done
    ) &
    bg_pid=$!
fi
for step in "${foreground[@]}"; do
    echo "=== $step"
    run_step "$step" || failed+=("$step")
done
if [ -n "$bg_pid" ]; then
    wait "$bg_pid"
    for step in "${background[@]}"; do
        cat "$WORK/step-$step.status"
        [ ! -e "$WORK/step-$step.failed" ] || failed+=("$step")
    done
fi
if [ ${#failed[@]} -gt 0 ]; then
    # Repeated here, at the end, so that the last lines of the output say what failed.
    echo
    for step in "${failed[@]}"; do failure_excerpt "$step"; done
    echo "FAILED steps: ${failed[*]} ($((SECONDS - start)) s); whole outputs in tests/output/<step>.log"
    exit 1
fi
echo "all steps passed: ${steps[*]} ($((SECONDS - start)) s); whole outputs in tests/output/<step>.log"

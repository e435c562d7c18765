#!/usr/bin/env bash
# The one test command: everything CI runs. Exits non-zero if any step fails.
#   scripts/test.sh            all steps
#   scripts/test.sh pytest     one step (lint, changelog, pytest, ansible-lint, sanity, docs)
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
ROOT=$(pwd)
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$ROOT/collections"
export ANSIBLE_NOCOLOR=1 PY_COLORS=0
PYVER=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kubeupgrade-storage-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

step_lint() { ruff check --output-format concise .; }

step_changelog() { antsibull-changelog lint; }

step_pytest() {
    python -m pytest tests -q "$@" 2>&1 | tee "$WORK/pytest.log"
    local rc=${PIPESTATUS[0]}
    grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$WORK/pytest.log" | tail -1 > "$ROOT/tests/output-summary.txt" 2>/dev/null || true
    return "$rc"
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
    local path="$WORK/installed" failed=0 name count=0
    for module in plugins/modules/*.py; do
        name=$(basename "$module" .py)
        ANSIBLE_COLLECTIONS_PATH="$path" ansible-doc -t module "kubeupgrade.storage.$name" > "$WORK/doc.txt" 2>&1 \
            && grep -q "^> MODULE kubeupgrade.storage.$name" "$WORK/doc.txt" || { echo "docs: module $name does not render:"; cat "$WORK/doc.txt"; failed=1; }
        count=$((count + 1))
    done
    local filters
    filters=$(PYTHONPATH="$path" python - <<'PYEOF'
import importlib, pathlib
for path in sorted(pathlib.Path("plugins/filter").glob("*.py")):
    mod = importlib.import_module(f"ansible_collections.kubeupgrade.storage.plugins.filter.{path.stem}")
    print("\n".join(sorted(mod.FilterModule().filters())))
PYEOF
    ) || { echo "docs: cannot list the filter plugins"; return 1; }
    for name in $filters; do
        ANSIBLE_COLLECTIONS_PATH="$path" ansible-doc -t filter "kubeupgrade.storage.$name" > "$WORK/doc.txt" 2>&1 \
            && grep -q "kubeupgrade.storage.$name" "$WORK/doc.txt" && ! grep -q "WARNING" "$WORK/doc.txt" \
            || { echo "docs: filter $name does not render:"; cat "$WORK/doc.txt"; failed=1; }
        count=$((count + 1))
    done
    for role in roles/*/; do
        name=$(basename "$role")
        ANSIBLE_COLLECTIONS_PATH="$path" ansible-doc -t role "kubeupgrade.storage.$name" > "$WORK/doc.txt" 2>&1 \
            || { echo "docs: role $name does not render:"; cat "$WORK/doc.txt"; failed=1; }
        count=$((count + 1))
    done
    echo "docs: rendered $count modules, filters and roles from the built collection"
    return $failed
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(lint changelog pytest ansible-lint sanity docs)
failed=()
for step in "${steps[@]}"; do
    start=$SECONDS
    echo "=== $step"
    if "step_${step//-/_}"; then
        echo "=== $step: ok ($((SECONDS - start)) s)"
    else
        echo "=== $step: FAILED ($((SECONDS - start)) s)"
        failed+=("$step")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED steps: ${failed[*]}"
    exit 1
fi
echo "all steps passed: ${steps[*]}"

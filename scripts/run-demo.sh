#!/usr/bin/env bash
# Demo: start a simulated three-apiserver control plane on Kubernetes 1.32 (seeded with the demo
# data), upgrade it to 1.33 with demo/playbook.yml, and stop the simulator (also on failure).
# Reports are written to demo-output/. Usage: scripts/run-demo.sh [extra ansible-playbook args]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
PYTHON="${PYTHON:-python3}"
PLAYBOOK_BIN="$(dirname "$(command -v "$PYTHON")")/ansible-playbook"
[ -x "$PLAYBOOK_BIN" ] || PLAYBOOK_BIN="$(command -v ansible-playbook)"

# The playbooks use the roles by their collection name: make this checkout the collection.
COLLECTIONS="${ANSIBLE_COLLECTIONS_PATH:-$REPO/collections}"
COLLECTIONS="${COLLECTIONS%%:*}"
if [ ! -e "$COLLECTIONS/ansible_collections/kubeupgrade/storage" ]; then
    mkdir -p "$COLLECTIONS/ansible_collections/kubeupgrade"
    ln -s "$REPO" "$COLLECTIONS/ansible_collections/kubeupgrade/storage"
fi

OUT="$REPO/demo-output"
STATE="$OUT/control-plane"
rm -rf "$OUT"
mkdir -p "$STATE"

echo "==> Starting a simulated control plane: 3 apiservers on Kubernetes 1.32, demo data"
PYTHONPATH="$REPO/tests/simulator" "$PYTHON" -m apisim --apiservers 3 --release 1.32 --seed demo \
    --state-dir "$STATE" >"$OUT/simulator.log" 2>&1 &
SIM_PID=$!
stop_simulator() {
    if kill -0 "$SIM_PID" 2>/dev/null; then
        echo "==> Stopping the simulated control plane"
        kill -TERM "$SIM_PID" 2>/dev/null || true
        wait "$SIM_PID" 2>/dev/null || true
    fi
}
trap stop_simulator EXIT INT TERM

for _ in $(seq 1 100); do
    [ -s "$STATE/control-plane.json" ] && break
    kill -0 "$SIM_PID" 2>/dev/null || { echo "simulator exited:"; cat "$OUT/simulator.log"; exit 1; }
    sleep 0.1
done
[ -s "$STATE/control-plane.json" ] || { echo "simulator did not start:"; cat "$OUT/simulator.log"; exit 1; }

start=$(date +%s)
status=0
KUBEUPGRADE_DEMO_STATE="$STATE/control-plane.json" \
ANSIBLE_COLLECTIONS_PATH="$COLLECTIONS" \
ANSIBLE_STDOUT_CALLBACK="${ANSIBLE_STDOUT_CALLBACK:-default}" \
ANSIBLE_CALLBACK_RESULT_FORMAT="${ANSIBLE_CALLBACK_RESULT_FORMAT:-yaml}" \
ANSIBLE_DISPLAY_SKIPPED_HOSTS="${ANSIBLE_DISPLAY_SKIPPED_HOSTS:-false}" \
ANSIBLE_PIPELINING="${ANSIBLE_PIPELINING:-1}" ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_RETRY_FILES_ENABLED=0 \
    "$PLAYBOOK_BIN" -i demo/inventory.yml demo/playbook.yml \
    -e "ansible_python_interpreter=$(command -v "$PYTHON")" \
    -e "kubeupgrade_report_dir=$OUT" "$@" || status=$?

echo
if [ "$status" -eq 0 ]; then
    echo "==> Demo finished in $(( $(date +%s) - start ))s. Reports:"
else
    echo "==> Demo FAILED (ansible-playbook exit $status) after $(( $(date +%s) - start ))s. Reports so far:"
fi
ls -1 "$OUT"/*.md "$OUT"/*.json 2>/dev/null || true
exit "$status"

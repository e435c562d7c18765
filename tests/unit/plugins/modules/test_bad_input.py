# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad input across every module and role: one clear failure naming the option, file or apiserver.

Options are checked before any request (the fake cluster's log stays empty); answers that are not
JSON come from a real local HTTP server, so the whole client path runs. No output may contain an
"Unexpected internal error" or a traceback, and every case ends well within its timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from kube_module_args import BASE_ARGS, CLUSTER_MODULES, MODULES
from kube_module_args import module as kube_module

from ansible_collections.kubeupgrade.storage.plugins.modules import (
    storage_migration,
    storage_state,
    storage_version_agreement,
    storage_version_check,
    storage_version_hash,
    storage_version_info,
)

REPO = Path(__file__).resolve().parents[4]

BINARY = bytes(range(256)) * 4


def assert_clean(result):
    """No internal error, no traceback, anywhere in the module's output."""
    text = json.dumps(result)
    assert "Unexpected internal error" not in text and "Traceback" not in text, text
    assert "exception" not in result, result


def kubeconfig_doc(server="https://10.0.0.10:6443"):
    return {"apiVersion": "v1", "kind": "Config", "current-context": "admin",
            "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": {"token": "secret-token"}}],
            "contexts": [{"name": "admin", "context": {"cluster": "c", "user": "u"}}]}


def without_host(**extra):
    args = {k: v for k, v in BASE_ARGS.items() if k not in ("host", "api_key")}
    args.update(extra)
    return args


# (case id, arguments replacing/adding to BASE_ARGS, needles the one message must contain)
CONNECTION_CASES = [
    ("timeout-zero", {"request_timeout": 0}, ["'request_timeout'", "above 0"]),
    ("timeout-negative", {"request_timeout": -3}, ["'request_timeout'", "above 0"]),
    ("proxy-no-scheme", {"proxy": "proxy.example.com:3128"}, ["'proxy'", "proxy URL"]),
    ("proxy-bad-port", {"proxy": "http://proxy.example.com:99999"}, ["'proxy'", "proxy URL"]),
    ("host-no-scheme", {"host": "10.0.0.10:6443"}, ["'host'", "apiserver URL"]),
    ("endpoint-no-scheme", {"endpoints": ["10.0.0.11:6443"]}, ["'endpoints'", "10.0.0.11:6443"]),
    ("endpoint-empty", {"endpoints": [""]}, ["endpoints #1 is empty", "not replaced by the kubeconfig's server"]),
    ("endpoint-blank-second", {"endpoints": ["https://10.0.0.11:6443", " "]}, ["endpoints #2 is empty"]),
    ("kubeconfig-clusters-int", without_host(kubeconfig={"clusters": 5}), ["'kubeconfig' mapping", "'clusters' must be a list"]),
    ("kubeconfig-users-str", without_host(kubeconfig={**kubeconfig_doc(), "users": "admin"}), ["'kubeconfig' mapping", "'users'"]),
    ("kubeconfig-bad-server", without_host(kubeconfig=kubeconfig_doc("10.0.0.10:6443")), ["cluster server in the 'kubeconfig' mapping"]),
    ("kubeconfig-list", without_host(kubeconfig=[1, 2]), ["kubeconfig", "mapping"]),
    ("resources-garbage", {"resources": ["Config Maps!"]}, ["'resources'", "'Config Maps!'", "resource names"]),
    ("resources-blank", {"resources": [""]}, ["'resources'", "non-empty"]),
]


@pytest.mark.parametrize("case, args, needles", CONNECTION_CASES, ids=[c[0] for c in CONNECTION_CASES])
@pytest.mark.parametrize("name", sorted(CLUSTER_MODULES))
def test_connection_and_shared_options_fail_before_any_request(run_module, fake_cluster, name, case, args, needles):
    module, extra = kube_module(name), MODULES[name][1]
    merged = {**BASE_ARGS, **extra, **args}
    if case.startswith("kubeconfig"):
        merged = {k: v for k, v in merged.items() if k not in ("host", "api_key")}
    if case.startswith("resources") and name == "storage_version_check":
        merged.setdefault("target_release", "1.33")
    failed, result = run_module(module, merged)
    assert failed, result
    for needle in needles:
        assert needle in result["msg"], (needle, result["msg"])
    assert result["error"]["type"] == "ConfigurationError"
    assert fake_cluster.log == [], f"{name} sent requests before validating: {fake_cluster.log[:3]}"
    assert_clean(result)
    assert "'host'" not in result["msg"] or case.startswith("host"), "blamed on the wrong option"


def test_kubeconfig_file_with_a_bad_server_is_blamed_on_the_file(run_module, fake_cluster, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig_doc("https://")))
    failed, result = run_module(storage_version_info, without_host(kubeconfig=str(path)))
    assert failed and f"kubeconfig {path}" in result["msg"] and "'host'" not in result["msg"]
    assert fake_cluster.log == []
    assert_clean(result)


@pytest.mark.parametrize("content, needle", [(BINARY, "not a text file"), (b"clusters: 5\n", "'clusters' must be a list"),
                                             (b"clusters: [\n", "not valid YAML")])
def test_kubeconfig_file_that_is_not_a_kubeconfig_is_named(run_module, fake_cluster, tmp_path, content, needle):
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    failed, result = run_module(storage_state, without_host(kubeconfig=str(path)))
    assert failed and str(path) in result["msg"] and needle in result["msg"]
    assert fake_cluster.log == []
    assert_clean(result)


def test_bad_target_endpoint_is_blamed_on_target_endpoint(run_module, fake_cluster):
    failed, result = run_module(storage_version_check, {**BASE_ARGS, "target_endpoint": "10.0.0.14:6443"})
    assert failed and "'target_endpoint' must be an apiserver URL" in result["msg"] and "'endpoints'" not in result["msg"]
    assert fake_cluster.log == []
    assert_clean(result)


@pytest.mark.parametrize("module, args", [
    (storage_version_check, {**BASE_ARGS}),
    (storage_migration, {**BASE_ARGS, "select": "from_check"}),
], ids=["check", "migration"])
def test_binary_crd_file_is_named(run_module, fake_cluster, tmp_path, module, args):
    path = tmp_path / "crd.yaml"
    path.write_bytes(BINARY)
    failed, result = run_module(module, {**args, "target_crds": [str(path)]})
    assert failed and str(path) in result["msg"] and "not a text file" in result["msg"], result["msg"]
    assert fake_cluster.log == []
    assert_clean(result)


@pytest.mark.parametrize("module, args", [
    (storage_version_check, {**BASE_ARGS, "target_release": "1.33"}),
    (storage_version_hash, {"resource": "deployments.apps", "release": "1.33"}),
], ids=["check", "hash"])
def test_binary_profiles_file_is_named(run_module, fake_cluster, tmp_path, module, args):
    path = tmp_path / "profiles.yml"
    path.write_bytes(BINARY)
    failed, result = run_module(module, {**args, "profiles_file": str(path)})
    assert failed and str(path) in result["msg"] and "not a text file" in result["msg"], result["msg"]
    assert fake_cluster.log == []
    assert_clean(result)


@pytest.mark.parametrize("module, args", [
    (storage_version_check, {**BASE_ARGS, "target_release": 1.3}),
    (storage_version_check, {**BASE_ARGS, "target_release": "1.3"}),
    (storage_migration, {**BASE_ARGS, "select": "from_check", "target_release": 1.3}),
    (storage_version_hash, {"resource": "deployments.apps", "release": 1.3}),
], ids=["check-float", "check-string", "migration-float", "hash-float"])
def test_a_release_yaml_read_as_a_float_gets_the_quoting_hint(run_module, fake_cluster, module, args):
    failed, result = run_module(module, args)
    assert failed and "quote it" in result["msg"] and "1.30" in result["msg"], result["msg"]
    assert [m for _e, m, _p, _q, _b in fake_cluster.log if m != "GET"] == []
    assert_clean(result)


# --- answers that are not JSON, from a real local HTTP server -------------------------------------

BODIES = {
    "html-login-page": (b"<html><head><title>Sign in</title></head><body>Please log in</body></html>", "text/html", "text/html"),
    "truncated-json": (b'{"kind":"APIVersions","versions":["v', "application/json", "not JSON"),
    "empty-body": (b"", "application/json", "an empty body"),
}


@pytest.fixture(params=sorted(BODIES))
def bad_apiserver(request):
    data, content_type, needle = BODIES[request.param]

    class Handler(BaseHTTPRequestHandler):
        def answer(self):
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", needle
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", sorted(CLUSTER_MODULES))
def test_a_body_that_is_not_json_names_the_apiserver(run_module, bad_apiserver, name):
    url, needle = bad_apiserver
    module, extra = kube_module(name), MODULES[name][1]
    args = {"host": url, "api_key": "secret-token-value", "endpoints": [url], "request_timeout": 5, **extra}
    failed, result = run_module(module, args)
    assert_clean(result)
    text = json.dumps(result)
    if name == "storage_version_info":  # no apiserver observed at all: fails, and still reports each endpoint
        assert failed and "no apiserver could be observed" in result["msg"] and url in result["msg"]
        assert not result["agreed"] and result["endpoints"][0]["reachable"] is False
        assert url in result["endpoints"][0]["error"]
        assert needle in result["endpoints"][0]["error"] and "HTTP 200" in result["endpoints"][0]["error"]
    else:
        assert failed and url in result["msg"], result["msg"]
    if name in ("storage_version_check", "storage_state", "storage_version_info"):
        assert needle in text and "GET /api" in text


# --- roles: argument specs, through ansible-playbook -------------------------------------------------

def _role_spec(role):
    return yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


MODULE_FLOAT_OPTIONS = {
    ("migrate", "migrate_agreement_interval"): (storage_version_agreement, "interval"),
    ("migrate", "migrate_agreement_timeout"): (storage_version_agreement, "timeout"),
    ("migrate", "migrate_timeout"): (storage_migration, "timeout"),
    ("rolling_upgrade", "rolling_upgrade_agreement_interval"): (storage_version_agreement, "interval"),
    ("rolling_upgrade", "rolling_upgrade_agreement_timeout"): (storage_version_agreement, "timeout"),
}


@pytest.mark.parametrize("role, option", sorted(MODULE_FLOAT_OPTIONS))
def test_role_specs_declare_the_type_the_module_takes(role, option):
    module, module_option = MODULE_FLOAT_OPTIONS[(role, option)]
    assert module.argument_spec()[module_option]["type"] == "float"
    assert _role_spec(role)[option]["type"] == "float", f"{role}: {option} must accept what {module_option} accepts"


@pytest.mark.parametrize("role", ["preflight", "rolling_upgrade"])
def test_required_role_variables_have_no_default_that_hides_them(role):
    required = [name for name, spec in _role_spec(role).items() if spec.get("required")]
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    assert required and not set(required) & set(defaults), f"{role}: defaults for required {set(required) & set(defaults)}"


def _run_playbook(tmp_path, play):
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(f"[kube_control_plane]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    binary = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run([str(binary), "-i", str(inventory), str(playbook)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


@pytest.mark.parametrize("role, variables, needle", [
    ("preflight", {}, "missing required arguments: preflight_target_release"),
    ("rolling_upgrade", {}, "missing required arguments: rolling_upgrade_target_release"),
    ("migrate", {"migrate_agreement_interval": "soon"}, "migrate_agreement_interval"),
], ids=["preflight-missing-release", "rolling-upgrade-missing-release", "migrate-interval-not-a-number"])
def test_role_argument_spec_fails_before_any_task(tmp_path, role, variables, needle):
    play = {"hosts": "localhost", "gather_facts": False,
            "tasks": [{"name": "role", "ansible.builtin.include_role": {"name": f"kubeupgrade.storage.{role}"}, "vars": variables}]}
    run = _run_playbook(tmp_path, play)
    assert run.returncode != 0
    assert needle in run.stdout, run.stdout[-2000:]
    assert "Validating arguments against arg spec" in run.stdout
    # ok=1 is the include itself: no task of the role ran.
    assert "ok=1 " in run.stdout and "changed=0" in run.stdout and "failed=1" in run.stdout, run.stdout[-1500:]
    tasks = [line for line in run.stdout.splitlines() if line.startswith("TASK [")]
    assert len(tasks) == 2 and "Validating arguments against arg spec" in tasks[1], tasks
    assert "Traceback" not in run.stdout + run.stderr


@pytest.mark.parametrize("name", ["storage_version_check", "storage_migration"])
def test_refresh_records_that_is_not_a_boolean_is_one_clear_error_before_any_request(run_module, fake_cluster, name):
    module, extra = kube_module(name), MODULES[name][1]
    failed, result = run_module(module, {**BASE_ARGS, **extra, "refresh_records": "perhaps"})
    assert failed and "refresh_records" in result["msg"] and "bool" in result["msg"], result["msg"]
    assert fake_cluster.log == [], f"{name} sent requests before validating: {fake_cluster.log[:3]}"
    assert_clean(result)

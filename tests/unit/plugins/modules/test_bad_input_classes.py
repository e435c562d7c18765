# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad input as classes, not single cases (issue 23, item 5).

Each class is a table run through the modules' own entry point (``main()``, as Ansible runs it): a
malformed inline kubeconfig, a number outside its range, a URL with credentials, a mapping or list
option whose elements have the wrong type. Every row must end in one failure whose message names the
option (or the kubeconfig field), with an ``error`` object, before any request, never an "Unexpected
internal error" or a traceback. The tables are generated from the argument specs where they can be,
and a coverage test fails when a new option of a class has no row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.parameters import PASS_VARS
from kube_module_args import BASE_ARGS, CLUSTER_MODULES, MODULE_PACKAGE, MODULES, module

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import MAX_PAGE_SIZE
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import NUMBER_RANGES, check_number
from ansible_collections.kubeupgrade.storage.plugins.module_utils.connection_args import connection_argument_spec
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import _url_secrets

REPO = Path(__file__).resolve().parents[4]
SECRET_TOKEN = "kubeconfig-secret-token-value"
# As with -vvv, the result echoes the module's arguments: asked for since ansible-core 2.20, always before.
ECHO_ARGUMENTS = {"_ansible_inject_invocation": True} if "inject_invocation" in PASS_VARS else {}
PASSWORD = "hunter2-url-password"


def full_spec(name) -> dict:
    """The options the module really takes: its own, plus the shared connection options for a cluster module."""
    own = module(name).argument_spec()
    return connection_argument_spec(**own) if MODULES[name][0] else dict(own)


def base_args(name, **extra) -> dict:
    cluster, args = MODULES[name]
    return {**(BASE_ARGS if cluster else {}), **args, **extra}


def assert_one_clean_failure(result, needles, types=("ConfigurationError",)):
    """Failed once, with an ``error`` object of one of ``types`` and every needle in ``msg``; no internal error."""
    text = json.dumps(result)
    assert result.get("failed"), result
    assert "Unexpected internal error" not in text and "Traceback" not in text and "exception" not in result, text
    assert result.get("error", {}).get("type") in types, result
    for needle in needles:
        assert needle in result["msg"], (needle, result["msg"])


def test_every_module_is_in_the_tables():
    files = {p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__"}
    assert files == set(MODULES), f"add {files - set(MODULES)} to kube_module_args.MODULES (and its options to the tables below)"


# --- class 1: an inline kubeconfig mapping of the wrong shape ------------------------------------------

def kubeconfig_doc(cluster=None, user=None, context=None, **top) -> dict:
    """A valid kubeconfig, with the cluster, user or context body (or top-level fields) replaced."""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "admin",
           "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.10:6443", "insecure-skip-tls-verify": True}
                         if cluster is None else cluster}],
           "users": [{"name": "u", "user": {"token": SECRET_TOKEN} if user is None else user}],
           "contexts": [{"name": "admin", "context": {"cluster": "c", "user": "u"} if context is None else context}]}
    doc.update(top)
    return doc


SERVER = {"server": "https://10.0.0.10:6443"}
# (case id, the 'kubeconfig' option, needles of the one message)
KUBECONFIG_CASES = [
    ("clusters-int", {"clusters": 5}, ["'clusters' must be a list", "got an int"]),
    ("users-int", {"users": 5}, ["'users' must be a list"]),
    ("contexts-int", {"contexts": 5}, ["'contexts' must be a list"]),
    ("clusters-string", {"clusters": "c"}, ["'clusters' must be a list", "got a str"]),
    ("users-mapping", {"users": {"name": "u"}}, ["'users' must be a list", "got a dict"]),
    ("cluster-entry-int", {"clusters": [5]}, ["clusters[0] must be a mapping with a string 'name'"]),
    ("cluster-name-int", kubeconfig_doc(clusters=[{"name": 5, "cluster": SERVER}]), ["clusters[0] must be a mapping with a string 'name'"]),
    ("user-body-int", {"users": [{"name": "x", "user": 3}]}, ["users[0].user must be a mapping", "got an int"]),
    ("context-body-empty-list", {"contexts": [{"name": "c", "context": []}]}, ["contexts[0].context must be a mapping", "got a list"]),
    ("cluster-body-empty-list", kubeconfig_doc(cluster=[]), ["clusters[0].cluster must be a mapping", "got a list"]),
    ("cluster-body-list", kubeconfig_doc(cluster=[SERVER]), ["clusters[0].cluster must be a mapping", "got a list"]),
    ("cluster-body-string", kubeconfig_doc(cluster="https://10.0.0.10:6443"), ["clusters[0].cluster must be a mapping"]),
    ("user-body-false", kubeconfig_doc(user=False), ["users[0].user must be a mapping", "got a bool"]),
    ("current-context-int", {"current-context": 7}, ["'current-context' must be a string", "got an int"]),
    ("current-context-int-full", kubeconfig_doc(**{"current-context": 7}), ["'current-context' must be a string"]),
    ("server-int", kubeconfig_doc(cluster={"server": 5}), ["clusters[0].cluster.server must be a string", "got an int"]),
    ("server-list", kubeconfig_doc(cluster={"server": ["https://10.0.0.10:6443"]}), ["clusters[0].cluster.server must be a string"]),
    ("insecure-string", kubeconfig_doc(cluster={**SERVER, "insecure-skip-tls-verify": "false"}),
     ["clusters[0].cluster.insecure-skip-tls-verify must be true or false", "got a str"]),
    ("tls-server-name-int", kubeconfig_doc(cluster={**SERVER, "tls-server-name": 5}), ["clusters[0].cluster.tls-server-name must be a string"]),
    ("ca-data-int", kubeconfig_doc(cluster={**SERVER, "certificate-authority-data": 5}),
     ["clusters[0].cluster.certificate-authority-data must be a string"]),
    ("ca-path-list", kubeconfig_doc(cluster={**SERVER, "certificate-authority": ["/ca.crt"]}),
     ["clusters[0].cluster.certificate-authority must be a string"]),
    ("proxy-url-int", kubeconfig_doc(cluster={**SERVER, "proxy-url": 5}), ["clusters[0].cluster.proxy-url must be a string"]),
    ("token-int", kubeconfig_doc(user={"token": 5}), ["users[0].user.token must be a string", "got an int"]),
    ("token-list", kubeconfig_doc(user={"token": [SECRET_TOKEN]}), ["users[0].user.token must be a string", "got a list"]),
    ("client-key-data-mapping", kubeconfig_doc(user={"client-key-data": {"a": 1}}), ["users[0].user.client-key-data must be a string"]),
    ("username-int", kubeconfig_doc(user={"username": 5, "password": 6}), ["users[0].user.username must be a string"]),
    ("exec-int", kubeconfig_doc(user={"exec": 5}), ["users[0].user.exec must be a mapping"]),
    ("auth-provider-int", kubeconfig_doc(user={"auth-provider": 5}), ["users[0].user.auth-provider must be a mapping"]),
    ("context-cluster-list", kubeconfig_doc(context={"cluster": ["c"], "user": "u"}), ["contexts[0].context.cluster must be a string"]),
    ("context-user-mapping", kubeconfig_doc(context={"cluster": "c", "user": {"name": "u"}}), ["contexts[0].context.user must be a string"]),
    ("preferences-list", kubeconfig_doc(preferences=[1]), ["'preferences' must be a mapping"]),
    ("kind-int", kubeconfig_doc(kind=5), ["'kind' must be a string"]),
]


def without_host(name, **extra):
    args = {k: v for k, v in base_args(name).items() if k not in ("host", "api_key")}
    args.update(extra)
    return args


class TestKubeconfigMapping:
    """Every malformed inline kubeconfig: one ConfigurationError naming the mapping and the field."""

    @pytest.mark.parametrize("case, doc, needles", KUBECONFIG_CASES, ids=[c[0] for c in KUBECONFIG_CASES])
    @pytest.mark.parametrize("name", CLUSTER_MODULES)
    def test_each_module_names_the_field(self, run_module, fake_cluster, name, case, doc, needles):
        failed, result = run_module(module(name), without_host(name, kubeconfig=doc))
        assert failed
        assert_one_clean_failure(result, ["the 'kubeconfig' mapping", *needles])
        assert SECRET_TOKEN not in json.dumps(result), "a kubeconfig secret was shown"
        assert fake_cluster.log == [], f"{name} sent requests before validating: {fake_cluster.log[:3]}"

    @pytest.mark.parametrize("case, doc, needles", KUBECONFIG_CASES, ids=[c[0] for c in KUBECONFIG_CASES])
    def test_the_same_shape_in_a_file_names_the_file(self, run_module, fake_cluster, tmp_path, case, doc, needles):
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        failed, result = run_module(module("storage_version_info"), without_host("storage_version_info", kubeconfig=str(path)))
        assert failed
        assert_one_clean_failure(result, [f"kubeconfig {path}", *needles])
        assert SECRET_TOKEN not in json.dumps(result)
        assert fake_cluster.log == []

    @pytest.mark.parametrize("value, needle", [(5, "got an int"), ([1, 2], "got a list"), (True, "got a bool")],
                             ids=["int", "list", "bool"])
    def test_a_kubeconfig_that_is_no_path_nor_mapping(self, run_module, fake_cluster, value, needle):
        failed, result = run_module(module("storage_state"), without_host("storage_state", kubeconfig=value))
        assert failed
        assert_one_clean_failure(result, ["'kubeconfig' must be a file path or a kubeconfig mapping", needle])
        assert fake_cluster.log == []

    @pytest.mark.parametrize("user", [{"token": SECRET_TOKEN}, {"username": "u", "password": SECRET_TOKEN},
                                      {"client-key-data": SECRET_TOKEN, "client-certificate-data": "Y2VydA=="},
                                      {"auth-provider": {"name": "oidc", "config": {"id-token": SECRET_TOKEN}}}],
                             ids=["token", "password", "client-key-data", "auth-provider-id-token"])
    @pytest.mark.parametrize("broken", ["users-mapping", "user-list", "server-int"])
    def test_its_secrets_are_masked_in_the_echoed_arguments(self, run_module, fake_cluster, user, broken):
        """Wherever the secret is in a malformed kubeconfig: the failure echoes the arguments it was given."""
        doc = kubeconfig_doc(user=user)
        if broken == "users-mapping":
            doc["users"] = {"name": "u", "user": user}
        elif broken == "user-list":
            doc["users"] = [{"name": "u", "user": [user]}]
        else:
            doc["clusters"] = [{"name": "c", "cluster": {"server": 5}}]
        args = without_host("storage_version_info", kubeconfig=doc, **ECHO_ARGUMENTS)
        failed, result = run_module(module("storage_version_info"), args)
        assert failed
        assert_one_clean_failure(result, ["the 'kubeconfig' mapping"])
        assert "module_args" in result.get("invocation", {})
        assert SECRET_TOKEN not in json.dumps(result), "a kubeconfig secret was shown"

    def test_a_kubeconfig_with_every_field_of_the_right_type_still_works(self, run_module, fake_cluster):
        doc = kubeconfig_doc(cluster={**SERVER, "insecure-skip-tls-verify": True, "tls-server-name": "kubernetes",
                                      "extensions": [], "disable-compression": False},
                             user={"token": SECRET_TOKEN, "extensions": None},
                             context={"cluster": "c", "user": "u", "namespace": "default"}, preferences={}, extensions=[])
        failed, result = run_module(module("storage_version_info"), without_host("storage_version_info", kubeconfig=doc))
        assert not failed, result["msg"]
        assert SECRET_TOKEN not in json.dumps(result)

    NOT_PEM = "bm90IGEgY2VydGlmaWNhdGU="  # base64 of "not a certificate": valid base64, no PEM inside

    @pytest.mark.parametrize("cluster, user, needles", [
        ({"server": "https://127.0.0.1:1", "certificate-authority-data": NOT_PEM}, None,
         ["The CA certificate", "cannot be loaded", "certificate-authority(-data)"]),
        ({"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True},
         {"client-certificate-data": NOT_PEM, "client-key-data": NOT_PEM},
         ["The client certificate", "cannot be loaded", "client-certificate(-data)"]),
    ], ids=["ca-data-not-pem", "client-cert-data-not-pem"])
    @pytest.mark.parametrize("name", CLUSTER_MODULES)
    def test_certificate_data_that_is_not_pem(self, run_module, name, cluster, user, needles):
        """Base64 that decodes to no PEM: one error naming the field, not "Unexpected internal error: SSLError"."""
        args = without_host(name, kubeconfig=kubeconfig_doc(cluster=cluster, user=user))
        args = {k: v for k, v in args.items() if k not in ("endpoints", "validate_certs")}
        failed, result = run_module(module(name), args)
        assert failed
        assert_one_clean_failure(result, needles)

    @pytest.mark.parametrize("user", [
        {"client-certificate-data": "Y2VydA==", "client-key-data": "not*base64"},
        {"client-certificate-data": "not*base64", "client-key-data": "a2V5"},
    ], ids=["key", "certificate"])
    def test_data_that_is_not_base64_is_named_and_leaves_no_file(self, tmp_path, user):
        """As Ansible runs a module (its own process): one error, and no decoded field left in the temporary directory
        (a field decoded after its file was made was left there, empty, at every such run)."""
        args = {"ANSIBLE_MODULE_ARGS": without_host("storage_state", kubeconfig=kubeconfig_doc(user=user))}
        env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
        out = subprocess.run([sys.executable, "-m", f"{MODULE_PACKAGE}.storage_state"], input=json.dumps(args), env=env,
                             capture_output=True, text=True, timeout=60, check=False)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert_one_clean_failure(result, ["-data' field is not base64"])
        assert sorted(p.name for p in tmp_path.iterdir()) == []

    @pytest.mark.parametrize("name", CLUSTER_MODULES)
    def test_a_ca_cert_file_that_is_not_pem(self, run_module, tmp_path, name):
        (tmp_path / "ca.crt").write_text("garbage\n")
        args = {**without_host(name), "host": "https://127.0.0.1:1", "api_key": "a-token-value", "ca_cert": str(tmp_path / "ca.crt")}
        args = {k: v for k, v in args.items() if k not in ("endpoints", "validate_certs")}
        failed, result = run_module(module(name), args)
        assert failed
        assert_one_clean_failure(result, [f"The CA certificate {tmp_path / 'ca.crt'} cannot be loaded", "'ca_cert'"])


# --- class 2: every number option, outside its range -----------------------------------------------------

def number_options():
    """(module, option, spec type) for every int and float option of every module."""
    return [(name, option, spec["type"]) for name in sorted(MODULES) for option, spec in sorted(full_spec(name).items())
            if spec.get("type") in ("int", "float")]


def bad_numbers(option, kind):
    """(case id, value, needle): above the range, far above it (Ansible's own conversion overflows), NaN, below."""
    bounds = NUMBER_RANGES[option]
    cases = [("huge", 10 ** 20 if kind == "int" else 1e300, "must be at most"),
             # 10**400 is no float and "inf" is no int: Ansible's conversion raises OverflowError, not a clean error
             ("overflow", "inf" if kind == "int" else 10 ** 400, "must be at most")]
    if kind == "float":
        cases.append(("nan", "nan", "must be a number"))
    below = bounds.low if bounds.above else (bounds.low - 1 if kind == "int" else bounds.low - 0.5)
    wanted = "must be above" if bounds.above else ("must not be negative" if bounds.low == 0 else "must be at least")
    cases.append(("below", below, wanted))
    return cases


NUMBER_CASES = [(name, option, case, value, needle) for name, option, kind in number_options()
                for case, value, needle in bad_numbers(option, kind)]


class TestNumberOptions:
    """Every int/float option of every module is bounded in one table, ``_validate.NUMBER_RANGES``."""

    def test_every_number_option_has_a_range(self):
        missing = sorted({option for _name, option, _kind in number_options() if option not in NUMBER_RANGES})
        assert not missing, f"add {missing} to _validate.NUMBER_RANGES"

    @pytest.mark.parametrize("name, option, kind", number_options())
    def test_every_default_is_in_its_range(self, name, option, kind):
        default = full_spec(name)[option].get("default")
        assert check_number(option, default) == default

    @pytest.mark.parametrize("option", sorted(NUMBER_RANGES))
    def test_the_bounds_themselves_are_allowed_and_just_outside_is_not(self, option):
        bounds = NUMBER_RANGES[option]
        check_number(option, bounds.high)
        with pytest.raises(ConfigurationError, match="must be at most"):
            check_number(option, bounds.high + 1)
        if bounds.above:
            check_number(option, bounds.low + 0.001)
            with pytest.raises(ConfigurationError, match="must be above"):
                check_number(option, bounds.low)
        else:
            check_number(option, bounds.low)
            with pytest.raises(ConfigurationError, match=f"'{option}' must"):
                check_number(option, bounds.low - 0.001)

    def test_the_page_size_range_is_the_etcd_scans_own(self):
        assert NUMBER_RANGES["page_size"].high == MAX_PAGE_SIZE

    @pytest.mark.parametrize("name, option, case, value, needle", NUMBER_CASES,
                             ids=[f"{n}-{o}-{c}" for n, o, c, _v, _n in NUMBER_CASES])
    def test_out_of_range_is_one_message_naming_the_option_and_the_range(
            self, run_module, fake_cluster, name, option, case, value, needle):
        failed, result = run_module(module(name), base_args(name, **{option: value}))
        assert failed
        assert_one_clean_failure(result, [f"'{option}' {needle}", f"(allowed: {NUMBER_RANGES[option].describe()})"])
        assert len(result["msg"]) < 300, "a huge number is shown by its size, not its digits"
        assert fake_cluster.log == [], f"{name} sent requests before validating: {fake_cluster.log[:3]}"

    @pytest.mark.parametrize("value", [1e300, 10 ** 20, float("inf")], ids=["1e300", "10**20", "inf"])
    def test_connection_settings_bound_the_request_timeout_themselves(self, value):
        with pytest.raises(ConfigurationError, match="'request_timeout' must be at most 3600"):
            ConnectionSettings.from_params({"host": "https://10.0.0.10:6443", "api_key": "t", "request_timeout": value})

    def test_an_option_without_a_range_must_still_be_finite(self):
        with pytest.raises(ConfigurationError, match="'unlisted' must be a finite number"):
            check_number("unlisted", float("inf"))
        assert check_number("unlisted", 10 ** 400) == 10 ** 400


# --- class 3: a URL with credentials, in any option or kubeconfig --------------------------------------

CREDENTIAL_URL = f"https://admin:{PASSWORD}@10.0.0.11:6443"
# (case id, module, arguments, needle naming where the URL came from)
CREDENTIAL_CASES = [
    *[(f"endpoints-{name}", name, {"endpoints": [CREDENTIAL_URL]}, "'endpoints'") for name in CLUSTER_MODULES],
    ("host", "storage_version_info", {"host": CREDENTIAL_URL}, "'host'"),
    ("host-bad-port", "storage_version_info", {"host": f"https://admin:{PASSWORD}@10.0.0.10:99999"}, "'host'"),
    ("token-as-user", "storage_state", {"endpoints": [f"https://{PASSWORD}@10.0.0.11:6443"]}, "'endpoints'"),
    ("endpoint-without-scheme", "storage_version_info", {"endpoints": [f"admin:{PASSWORD}@10.0.0.11:6443"]}, "'endpoints'"),
    ("endpoint-space-in-user", "storage_version_info", {"endpoints": [f"https://ad min:{PASSWORD}@10.0.0.11:6443"]},
     "'endpoints'"),
    ("proxy", "storage_version_info", {"proxy": f"http://admin:{PASSWORD}@proxy.example.com:3128"}, "'proxy'"),
    ("proxy-bad-port", "storage_version_info", {"proxy": f"http://admin:{PASSWORD}@proxy.example.com:99999"}, "'proxy'"),
    ("target-endpoint", "storage_version_check", {"target_endpoint": CREDENTIAL_URL}, "'target_endpoint'"),
    ("upgrade-order", "storage_version_check", {"upgrade_order": [CREDENTIAL_URL], "upgrading": CREDENTIAL_URL}, "'upgrade_order'"),
    ("etcd-endpoints-audit", "storage_version_audit", {"etcd_endpoints": [f"https://root:{PASSWORD}@127.0.0.1:2379"]},
     "'etcd_endpoints'"),
    ("etcd-endpoints-rehearsal", "storage_rehearsal", {"etcd_endpoints": [f"https://root:{PASSWORD}@127.0.0.1:2379"]},
     "'etcd_endpoints'"),
    ("kubeconfig-server", "storage_version_info",
     {"kubeconfig": kubeconfig_doc(cluster={"server": CREDENTIAL_URL}), "host": None, "api_key": None},
     "The cluster server in the 'kubeconfig' mapping"),
    ("kubeconfig-proxy-url", "storage_version_info",
     {"kubeconfig": kubeconfig_doc(cluster={**SERVER, "proxy-url": f"http://u:{PASSWORD}@proxy.example.com:3128"}),
      "host": None, "api_key": None}, "The proxy-url in the kubeconfig"),
]


class TestUrlCredentials:
    """A URL with user:password@ is refused naming the option; the password is in no message nor result."""

    @pytest.mark.parametrize("case, name, args, needle", CREDENTIAL_CASES, ids=[c[0] for c in CREDENTIAL_CASES])
    def test_refused_without_showing_the_password(self, run_module, fake_cluster, case, name, args, needle):
        merged = {k: v for k, v in base_args(name, **args).items() if v is not None}
        # as with -vvv: the result echoes the module's arguments (Ansible masks the values it was told are secret)
        merged.update(ECHO_ARGUMENTS)
        failed, result = run_module(module(name), merged)
        assert failed
        assert_one_clean_failure(result, [needle, "credentials", "***@"])
        assert "********" not in result["msg"], "the message itself must leave the password out, not Ansible's masking"
        assert "module_args" in result.get("invocation", {}), result
        assert PASSWORD not in json.dumps(result), "the URL's password was shown"
        assert fake_cluster.log == []

    def test_a_kubeconfig_file_server_with_credentials(self, run_module, fake_cluster, tmp_path):
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig_doc(cluster={"server": CREDENTIAL_URL})))
        failed, result = run_module(module("storage_state"), without_host("storage_state", kubeconfig=str(path)))
        assert failed
        assert_one_clean_failure(result, [f"The cluster server in kubeconfig {path}", "credentials", "***@"])
        assert PASSWORD not in json.dumps(result)

    @pytest.mark.parametrize("option, value", [("impersonate_user", "oidc:jane@example.com"),
                                               ("context", "kubernetes-admin@kubernetes")], ids=["oidc-user", "context"])
    def test_names_with_an_at_sign_are_neither_refused_nor_masked(self, run_module, fake_cluster, option, value):
        args = {**base_args("storage_version_info"), option: value, "endpoints": ["10.0.0.11:6443"], **ECHO_ARGUMENTS}
        failed, result = run_module(module("storage_version_info"), args)
        assert failed
        assert_one_clean_failure(result, ["'endpoints' must be an apiserver URL"])
        assert result["invocation"]["module_args"][option] == value, "a name was masked as if it were a password"

    def test_what_is_masked_a_password_or_a_token_never_a_short_user_or_a_name(self):
        token = "0123456789abcdef0123"
        params = {"target_crds": ["description: clone ssh://git@github.com/example/crds"],
                  "impersonate_user": "oidc:jane@example.com",
                  "endpoints": [f"https://{token}@10.0.0.11:6443", "admin:s3cret@10.0.0.12:6443"],
                  "proxy": "http://u:p%40ss@proxy:3128"}
        assert set(_url_secrets(params)) == {token, "s3cret", "p%40ss", "p@ss"}

    def test_from_the_environment(self, run_module, fake_cluster, monkeypatch):
        monkeypatch.setenv("K8S_AUTH_HOST", CREDENTIAL_URL)
        failed, result = run_module(module("storage_version_info"),
                                    {k: v for k, v in base_args("storage_version_info").items() if k != "host"})
        assert failed
        assert_one_clean_failure(result, ["'host'", "credentials"])
        assert PASSWORD not in json.dumps(result)


# --- class 4: mapping and list options with elements of the wrong type ---------------------------------

# (module, option, bad value, needles, error types): each option that takes a mapping or a list.
ERRORS = ("ConfigurationError", "ManifestError", "ProfileError")
ELEMENT_CASES = [
    # (module arguments travel as JSON: a YAML key 5 arrives as "5"; an empty subject names nothing)
    ("storage_rehearsal", "migrate_with", {"feature_gates": "A=true"}, ["migrate_with must be a dictionary with apiserver_binary"]),
    ("storage_rehearsal", "migrate_with", {"apiserver_binary": "/x", "bogus": 1}, ["migrate_with: unknown key(s) bogus"]),
    ("storage_version_check", "accept", {"": "re-created by the operator"}, ["accept", "must be a non-empty string"]),
    ("storage_version_check", "accept", {"widgets.example.com": ["reason"]}, ["accept", "needs a reason"]),
    ("storage_version_agreement", "accept", {" ": "reason"}, ["accept", "must be a non-empty string"]),
    ("storage_version_agreement", "accept", {"metrics.k8s.io/v1beta1": 5}, ["accept", "needs a reason"]),
    ("storage_version_check", "accept", [1], ["'accept'"]),
    ("storage_version_check", "target_crds", [5], ["target_crds"]),
    ("storage_version_check", "target_crds", [[1]], ["target_crds"]),
    ("storage_version_check", "target_crds", [None], ["target_crds"]),
    ("storage_migration", "target_crds", [5], ["target_crds"]),
    ("storage_version_check", "profiles", {"1.33": 5}, ["profiles"]),
    ("storage_migration", "profiles", {"1.33": [1]}, ["profiles"]),
    ("storage_version_hash", "profiles", {"1.33": {"deployments.apps": 5}}, ["profiles"]),
    ("storage_version_audit", "profiles", {"releases": 5}, ["profiles"]),
    ("storage_version_check", "audit", 5, ["audit"]),
    ("storage_version_check", "audit", {"resources": 5}, ["audit"]),
    ("storage_state", "audit", [1], ["audit"]),
    ("storage_state", "audit", {"resources": [5]}, ["audit"]),
    ("storage_migration", "objects_from_audit", 5, ["objects_from_audit"]),
    ("storage_migration", "objects_from_audit", {"resources": {"configmaps": 5}}, ["objects_from_audit"]),
    ("storage_version_check", "rehearsal", [1], ["rehearsal"]),
    ("storage_version_check", "running_releases", [""], ["running_releases"]),
    ("storage_version_audit", "readable_versions", {"pods": 5}, ["readable_versions"]),
    ("storage_version_audit", "readable_versions", {"pods": [5]}, ["readable_versions"]),
    ("storage_version_audit", "etcd_endpoints", [5], ["etcd_endpoints"]),
    ("storage_version_check", "upgrade_order", [{"host": "a"}], ["upgrade_order"]),
    ("storage_version_check", "timeline", [{"at": "2026-12-02T10:00:00Z"}], ["timeline", "timeline_step filter"]),
    ("storage_version_check", "timeline", [5], ["timeline"]),
    ("storage_version_info", "endpoints", [5], ["'endpoints'"]),
    ("storage_version_info", "endpoints", [{"url": "https://10.0.0.11:6443"}], ["'endpoints'"]),
    ("storage_version_info", "resources", [{"name": "pods"}], ["'resources'"]),
    # a name no apiserver serves (each answered, with complete discovery): the option, did you mean, the apiservers asked
    ("storage_version_info", "resources", ["deployment.apps"],
     ["resources: no apiserver serves 'deployment.apps' (did you mean deployments.apps", "https://10.0.0.11:6443"]),
    ("storage_version_info", "resources", ["pods", "pod"], ["resources: no apiserver serves 'pod' (did you mean pods"]),
    ("storage_state", "resources", ["deployment.apps"],
     ["resources: no apiserver serves 'deployment.apps' (did you mean deployments.apps", "https://10.0.0.13:6443"]),
    ("storage_state", "resources", ["configmap"], ["resources: no apiserver serves 'configmap' (did you mean configmaps"]),
    ("storage_version_info", "include", [5], ["include"]),
    ("storage_version_check", "fail_on", ["never"], ["fail_on"]),
]
# Options of the class whose elements need no row: Ansible's own spec checks them, or any string is valid.
ELEMENTS_CHECKED_ELSEWHERE = {
    "kubeconfig": "class 1 (TestKubeconfigMapping)",
    "proxy_headers": "suboptions of type str, checked by Ansible",
    "impersonate_groups": "any string is a group name (Ansible converts the elements to strings)",
    "judged_before": "names of the previous gate's resources, compared as strings",
    "candidates": "versions compared as strings",
}


def _mapping_and_list_options():
    return sorted({(name, option) for name in MODULES for option, spec in full_spec(name).items()
                   if spec.get("type") in ("dict", "list", "raw")})


class TestMappingAndListOptions:
    """Every option taking a mapping or a list refuses elements of the wrong type, naming the option."""

    def test_every_mapping_or_list_option_has_a_row(self):
        covered = {option for _name, option, _value, _needles in ELEMENT_CASES} | set(ELEMENTS_CHECKED_ELSEWHERE)
        missing = [(name, option) for name, option in _mapping_and_list_options() if option not in covered]
        assert not missing, f"add bad-element rows for {missing} to ELEMENT_CASES"

    @pytest.mark.parametrize("name, option, value, needles", ELEMENT_CASES,
                             ids=[f"{n}-{o}-{i}" for i, (n, o, _v, _x) in enumerate(ELEMENT_CASES)])
    def test_wrong_elements_are_one_message_naming_the_option(self, run_module, fake_cluster, name, option, value, needles):
        args = base_args(name, **{option: value})
        if option == "target_crds" and name == "storage_migration":
            args.update(select="from_check", resources=[])
        if option == "profiles" and name == "storage_version_audit":
            args["target_release"] = "1.33"
        if option == "upgrade_order":
            args["upgrading"] = "https://10.0.0.11:6443"
        failed, result = run_module(module(name), args)
        assert failed
        text = json.dumps(result)
        assert "Unexpected internal error" not in text and "Traceback" not in text, text
        for needle in needles:
            assert needle in result["msg"], (needle, result["msg"])
        assert result.get("error") is None or result["error"].get("type") in ERRORS, result
        assert [m for _e, m, _p, _q, _b in fake_cluster.log if m != "GET"] == []

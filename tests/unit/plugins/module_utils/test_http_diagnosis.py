# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why an apiserver could not be read, decided once in the API layer, and credentials a kubeconfig plugin did not
give: each its own message naming where and the fix."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError


@pytest.mark.parametrize("status, message, problem", [
    (401, "Unauthorized", diagnosis.CREDENTIALS),
    (403, 'forbidden: User "system:anonymous" cannot get path "/api"', diagnosis.ANONYMOUS),
    (403, 'forbidden: User "nobody" cannot get path "/api"', diagnosis.FORBIDDEN),
    (500, "boom", None),
])
def test_a_status_says_its_problem(status, message, problem):
    assert diagnosis.of_status(status, message) == problem


def test_one_fix_per_problem_naming_its_apiservers():
    text = diagnosis.steps({"https://a": diagnosis.CREDENTIALS, "https://b": diagnosis.TLS, "https://c": None,
                            "https://d": diagnosis.CREDENTIALS, "https://e": diagnosis.ANONYMOUS, "https://f": diagnosis.NOT_JSON})
    parts = text.split("; ")
    assert parts[0].startswith("fix the credentials used for https://a, https://d (") and "HTTP 401" in parts[0]
    assert "saw no identity" in parts[1] and "https://e" in parts[1]
    assert parts[2].startswith("fix TLS to https://b") and "not the Kubernetes API" in parts[3]
    assert parts[4] == "make https://c reachable (or remove an apiserver that no longer exists from the endpoints)"
    assert "do not agree" not in text


def kubeconfig(user):
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": user}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


@pytest.mark.parametrize("user, needles", [
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/nonexistent/plugin", "interactiveMode": "Never"}},
     ["exec credential plugin '/nonexistent/plugin' gave no credential", "No such file"]),
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/false", "interactiveMode": "Never"}},
     ["exec credential plugin '/bin/false' gave no credential", "process returned 1"]),
    ({"auth-provider": {"name": "weird", "config": {}}}, ["auth-provider 'weird' gave no credential"]),
])
def test_a_plugin_that_gives_no_credential_is_an_error_not_an_anonymous_request(user, needles):
    with pytest.raises(ConfigurationError) as raised:
        ConnectionSettings.from_params({"kubeconfig": kubeconfig(user)})
    for needle in needles:
        assert needle in str(raised.value)
    # with credentials of its own the user's plugin is not used, so it does not matter
    settings = ConnectionSettings.from_params({"kubeconfig": kubeconfig(user), "api_key": "t0ken"})
    assert settings.headers["Authorization"] == "Bearer t0ken"

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module's ``main()`` in-process and capture its exit/fail JSON; serve fake apiservers.

``fake_cluster`` replaces ``ApiClient.request`` so every client the module builds (one per
endpoint, plus the connection's host) answers from a per-endpoint route table: the module's own
argument handling, connection resolution and error paths all run for real.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "module_utils"))

from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kube_module_args import ENDPOINTS, HOST


@pytest.fixture
def run_module(capsys):
    """``run_module(module, args, check_mode=False, diff=False) -> (failed, result)``."""

    def run(module, args, check_mode=False, diff=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        if diff:
            args["_ansible_diff"] = True
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exit_info:
                module.main()
        out = capsys.readouterr().out
        result = json.loads(out.strip().splitlines()[-1])
        assert "Traceback" not in json.dumps(result.get("msg", "")), result
        return bool(result.get("failed")) or exit_info.value.code not in (0, None), result

    return run


class FakeCluster:
    """Routes per endpoint URL; ``HOST`` (the cluster client) gets the cluster-wide routes."""

    def __init__(self):
        from kube_fakes import discovery_routes  # the collection is importable only once pytest-ansible set it up

        self.routes = {url: discovery_routes() for url in ENDPOINTS}
        self.routes[HOST] = discovery_routes()
        self.log = []

    def client(self, endpoint):
        from kube_fakes import FakeApiClient

        return FakeApiClient(endpoint, self.routes.setdefault(endpoint, {}), self.log)

    def set_all(self, path, route):
        for routes in self.routes.values():
            routes[path] = route

    def writes(self):
        return [(e, m, p) for e, m, p, _q, _b in self.log if m != "GET"]

    def serve_deployments_hash(self, endpoint, storage_hash):
        """``endpoint`` answers the recorded apps/v1 discovery with ``storage_hash`` for deployments: it disagrees with
        its peers."""
        from kube_fakes import recorded

        doc = recorded("discovery/apis-apps_v1-legacy.json")["body"]
        for item in doc["resources"]:
            if item["name"] == "deployments":
                item["storageVersionHash"] = storage_hash
        self.routes[endpoint]["/apis/apps/v1"] = (200, doc)


@pytest.fixture
def fake_cluster(monkeypatch):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import client as client_mod

    cluster = FakeCluster()

    def request(self, method, path, query=None, body=None, content_type="application/json",
                accept="application/json", timeout=None):
        return cluster.client(self.endpoint).request(method, path, query=query, body=body, content_type=content_type,
                                                     accept=accept, timeout=timeout)

    monkeypatch.setattr(client_mod.ApiClient, "request", request)
    return cluster

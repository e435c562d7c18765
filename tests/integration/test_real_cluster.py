# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module tests that run against a real cluster as well as the simulator (``KUBEUPGRADE_TEST_KUBECONFIG``).

They need no admin interface: they judge the cluster through its API only. Each test works in its
own namespace with its own CRD group and cleans up (see ``real_cluster.py``). The modules run
in-process through their real ``main()``.
"""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported

pytestmark = pytest.mark.real_cluster


def run_module(module, capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "exception" not in result, result.get("exception")
    return result


def test_new_crd_is_observed_recorded_unknown_then_idempotent(cluster, sandbox, capsys):
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_state, storage_version_info

    sandbox.create_crd(storage="v1")
    sandbox.create_widget("v1", "w-0", {"size": 1})

    args = cluster.module_args(resources=[sandbox.resource], include=["crds"])
    info = run_module(storage_version_info, capsys, args)
    assert not info.get("failed"), info
    seen = info["resources"][sandbox.resource]
    assert set(seen["storage_versions"]) == set(cluster.endpoints), seen
    assert set(seen["storage_versions"].values()) == {"v1"}, seen
    assert info["crds"][sandbox.resource]["stored_versions"] == ["v1"], info["crds"]

    first = run_module(storage_state, capsys, cluster.module_args(resources=[sandbox.resource]))
    assert not first.get("failed") and first["changed"], first
    # Objects written before the record existed cannot be vouched for: the record lists Unknown, next
    # to the hash every apiserver reports now.
    record = sandbox.storage_state()
    assert record is not None, "no StorageState record was written"
    current = seen["hashes"][cluster.endpoints[0]]
    assert record["status"]["currentStorageVersionHash"] == current, record
    assert record["status"]["persistedStorageVersionHashes"] == ["Unknown", current], record

    second = run_module(storage_state, capsys, cluster.module_args(resources=[sandbox.resource]))
    assert not second.get("failed") and not second["changed"], second
    assert sandbox.storage_state()["status"] == record["status"]


def test_client_migration_rewrites_old_objects_and_prunes_stored_versions(cluster, sandbox, capsys):
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration

    sandbox.create_crd(storage="v1alpha1")
    for i in range(3):
        sandbox.create_widget("v1alpha1", f"w-{i}", {"size": i})
    sandbox.switch_storage("v1")
    sandbox.create_widget("v1", "w-new", {"size": 9})
    assert sandbox.stored_versions() == ["v1alpha1", "v1"]
    before = sandbox.widgets()

    result = run_module(storage_migration, capsys, cluster.module_args(
        resources=[sandbox.resource], backend="client", update_records=True, prune_crd_stored_versions=True,
        poll_interval=0.1))
    assert not result.get("failed"), result
    (migration,) = result["migrations"]
    assert migration["resource"] == sandbox.resource and migration["status"] == "succeeded", migration
    assert migration["objects_migrated"] == 4, migration

    # The cluster now says it: only v1 is stored, and every object reads back unchanged.
    assert sandbox.stored_versions() == ["v1"]
    assert sandbox.widgets() == before
    record = sandbox.storage_state()
    assert record["status"]["persistedStorageVersionHashes"] == [record["status"]["currentStorageVersionHash"]], record

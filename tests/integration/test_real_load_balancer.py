# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One host whose URL reaches two real apiservers (a load balancer, as an operator may write it): the identity Leases
list two, so nothing is written - no migration before the gate, no record - and the run stops before any host, naming
the cause. Writes are counted in etcd: every key's mod_revision, before and after."""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from real_binaries import TODAY_ETCD, TODAY_FROM, TODAY_TO, explain, run, seed_135, versions

pytestmark = pytest.mark.slow

# Written by the apiservers themselves on their own schedule, whatever a client does.
OWN_WRITES = ("/registry/leases/", "/registry/events/", "/registry/masterleases/", "/registry/peerserverleases/")


def written_revisions(plane) -> dict:
    """{key: mod_revision} of every key under /registry/ but the apiservers' own bookkeeping."""
    body = {"key": base64.b64encode(b"/registry/").decode(), "range_end": base64.b64encode(b"/registry0").decode(),
            "keys_only": True}
    kvs = json.loads(plane.etcd._request("POST", "/v3/kv/range", body)).get("kvs", [])
    found = {base64.b64decode(kv["key"]).decode(errors="replace"): kv["mod_revision"] for kv in kvs}
    return {key: rev for key, rev in found.items() if not key.startswith(OWN_WRITES)}


@pytest.mark.parametrize("playbook", ["upgrade.yml", "migrate.yml"])
def test_one_url_for_two_apiservers_writes_nothing_and_names_the_cause(
        real_plane_factory, ansible_playbook, tmp_path, playbook):
    plane = real_plane_factory([TODAY_FROM, TODAY_FROM], etcd_version=TODAY_ETCD)
    seed_135(plane)
    inventory = tmp_path / "lb.yml"
    inventory.write_text(yaml.safe_dump({"kube_control_plane": {
        "hosts": {"lb": {"kubeupgrade_apiserver_url": plane.endpoints[0], "kubeupgrade_realcp_index": 0}},
        "vars": {"ansible_connection": "local", "kubeupgrade_connection": {"kubeconfig": str(plane.kubeconfig)},
                 "kubeupgrade_realcp_state": str(plane.state_file),
                 "kubeupgrade_realcp_pythonpath": str(plane.state()["cli"]["pythonpath"])}}}), encoding="utf-8")
    before = written_revisions(plane)
    result = run(ansible_playbook, playbook, plane, tmp_path, inventory=inventory, kubeupgrade_target_release=TODAY_TO)
    assert result.rc != 0, explain(result)
    after = written_revisions(plane)
    changed = sorted(key for key in set(before) | set(after) if before.get(key) != after.get(key))
    assert changed == [], changed
    assert versions(plane) == ["v1.35.3", "v1.35.3"], "an apiserver was touched"
    errors = [line for line in result.stdout.splitlines() if line.startswith("[ERROR]")]
    # the pre-flight's gate names the finding; migrate.yml's agreement gate says it in words
    assert errors and ("(apiservers not observed)" in errors[0] or "lists 2 apiservers" in errors[0]), errors


def test_a_host_url_that_reaches_another_host_s_apiserver_writes_nothing_and_names_both_urls(
        real_plane_factory, ansible_playbook, tmp_path):
    """cp2's URL written as another name of cp1's apiserver (a copied inventory line): two URLs, two identity Leases,
    so the counts agree - but both URLs are answered by apiserver 0 (its advertised address and serving certificate),
    and apiserver 1 is never observed. Nothing is written, no host is touched, and the first error line names it."""
    plane = real_plane_factory([TODAY_FROM, TODAY_FROM], etcd_version=TODAY_ETCD)
    seed_135(plane)
    first = plane.endpoints[0]
    inventory = tmp_path / "copied.yml"
    inventory.write_text(yaml.safe_dump({"kube_control_plane": {
        "hosts": {"cp1": {"kubeupgrade_apiserver_url": first, "kubeupgrade_realcp_index": 0},
                  "cp2": {"kubeupgrade_apiserver_url": first.replace("127.0.0.1", "localhost"), "kubeupgrade_realcp_index": 1}},
        "vars": {"ansible_connection": "local", "kubeupgrade_connection": {"kubeconfig": str(plane.kubeconfig)},
                 "kubeupgrade_realcp_state": str(plane.state_file),
                 "kubeupgrade_realcp_pythonpath": str(plane.state()["cli"]["pythonpath"])}}}), encoding="utf-8")
    before = written_revisions(plane)
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, inventory=inventory, kubeupgrade_target_release=TODAY_TO)
    assert result.rc != 0, explain(result)
    after = written_revisions(plane)
    assert sorted(key for key in set(before) | set(after) if before.get(key) != after.get(key)) == []
    assert versions(plane) == ["v1.35.3", "v1.35.3"], "an apiserver was touched"
    errors = [line for line in result.stdout.splitlines() if line.startswith("[ERROR]")]
    assert errors and "(apiservers not observed)" in errors[0], errors
    print(f"\nfirst error line ({len(errors[0])} characters): {errors[0]}")
    assert f"{first} and {first.replace('127.0.0.1', 'localhost')} reached one apiserver" in result.stdout, explain(result)

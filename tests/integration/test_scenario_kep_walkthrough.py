# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HA case walkthrough of the KEP "Automated Storage Version Migration with Storage Version
Hash" (section "Case walkthrough"), played with the collection's playbooks against three simulated apiservers.

The storage version of LeaseCandidates moves from v1alpha2 ("v1") in 1.32 to v1beta1 ("v2") in 1.33,
and a 1.32 apiserver cannot decode v1beta1. So a migration that ran while any apiserver is still (or
again) on 1.32 would make LeaseCandidates unreadable through that apiserver: the gate must hold it.

| KEP minute | here |
| --- | --- |
| 0 | pre-flight + migration on 1.32: persisted [v1] |
| 3-10 | apiserver 1 upgraded; persisted [v1, v2]; no migration (apiservers 2 and 3 still on 1.32) |
| 12-20 | apiservers 2 and 3 upgraded; they agree |
| 22-30 | apiserver 3 rolled back; the migration is cancelled (gate fails, nothing rewritten) |
| 34-45 | apiserver 3 upgraded again; consensus; migration; persisted [v2] |
"""

from __future__ import annotations

import pytest
from test_playbooks_helpers import (
    HASH_V1ALPHA2,
    HASH_V1BETA1,
    LEASECANDIDATES,
    assert_content_unchanged,
    assert_readable_everywhere,
    encodings,
    explain,
    releases,
    run,
    snapshot,
    storage_state,
)

# Several playbook runs each: started first (tests/conftest.py) so that parallel workers share them out.
pytestmark = pytest.mark.slow


@pytest.mark.slow(minutes=6)
def test_kep_ha_walkthrough(sim, ansible_playbook, tmp_path):
    # Minute 0: every apiserver on 1.32; the records are established and Unknown is resolved.
    result = run(ansible_playbook, "migrate.yml", sim, tmp_path)
    assert result.rc == 0, explain(result)
    assert storage_state(sim, LEASECANDIDATES)["persistedStorageVersionHashes"] == [HASH_V1ALPHA2]
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1alpha2"}
    before = snapshot(sim)

    # Minutes 3-10: apiserver 1 is upgraded (the play is limited to it). Its new hash is recorded, and
    # the final migration waits because apiservers 2 and 3 still run 1.32 (and report v1).
    result = run(ansible_playbook, "upgrade.yml", sim, tmp_path, kubeupgrade_upgrade_hosts="cp1")
    assert result.rc == 0, explain(result)
    assert "Not migrating or writing the final report yet" in result.stdout, explain(result)
    assert releases(sim) == ["1.33", "1.32", "1.32"]
    assert storage_state(sim, LEASECANDIDATES)["persistedStorageVersionHashes"] == [HASH_V1ALPHA2, HASH_V1BETA1]
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1alpha2"}, "migrated while apiservers disagreed"
    assert_readable_everywhere(sim)

    # Minutes 12-20: apiservers 2 and 3 are upgraded (apiserver 1 is skipped: already on 1.33).
    result = run(ansible_playbook, "upgrade.yml", sim, tmp_path, kubeupgrade_finalise=False)
    assert result.rc == 0, explain(result)
    assert releases(sim) == ["1.33", "1.33", "1.33"]
    assert result.recap["cp1"].get("changed", 0) == 0, "apiserver 1 was upgraded twice"

    # Minutes 22-30: apiserver 3 is rolled back. The migration is cancelled: the gate sees the
    # disagreement and fails, nothing is rewritten, and apiserver 3 can still read everything.
    sim.admin.set_release(2, "1.32")
    result = run(ansible_playbook, "migrate.yml", sim, tmp_path)
    assert result.rc != 0, explain(result)
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1alpha2"}, "migrated while apiservers disagreed"
    assert storage_state(sim, LEASECANDIDATES)["persistedStorageVersionHashes"] == [HASH_V1ALPHA2, HASH_V1BETA1]
    assert_readable_everywhere(sim)

    # Minutes 34-45: apiserver 3 is upgraded again; consensus; the migration runs; persisted [v2].
    result = run(ansible_playbook, "upgrade.yml", sim, tmp_path)
    assert result.rc == 0, explain(result)
    assert releases(sim) == ["1.33", "1.33", "1.33"]
    assert storage_state(sim, LEASECANDIDATES)["persistedStorageVersionHashes"] == [HASH_V1BETA1]
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1beta1"}
    assert_content_unchanged(before, snapshot(sim))
    assert_readable_everywhere(sim)

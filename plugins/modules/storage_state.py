#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep StorageState records up to date with what every apiserver reports."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_state
short_description: Keep StorageState records of persisted storage versions
description:
  - Keeps one C(migration.k8s.io/v1alpha1) StorageState record per persisted resource, as the
    kube-storage-version-migrator trigger controller does, but driven by the playbook run.
  - A missing record is created with C(persistedStorageVersionHashes=["Unknown"]) plus the hashes observed now,
    because objects written before may be in any version. Newly observed hashes from every apiserver are appended;
    nothing is ever removed here (only a completed migration shrinks the list). The heartbeat is refreshed when
    older than O(heartbeat_interval).
  - Installs the StorageState CRD when it is missing, unless O(install_crd=false).
  - Writes only from a whole observation - with O(state=present), an apiserver that does not answer fails the task
    naming it, and no record is written (a record set from part of the control plane could miss the storage versions
    the others write). The C(refresh_records) option of M(kubeupgrade.storage.storage_version_check) and
    M(kubeupgrade.storage.storage_migration) skips the refresh, with a warning, for the same reason.
  - Idempotent - a second run with nothing new (with O(audit), also a new audit that finds the same) writes nothing
    and reports C(changed=false).
  - Records are independent of each other and are written up to 8 at a time, each with its own C(resourceVersion)
    precondition. A record that cannot be written fails the task with its error; the records not yet started are not
    written.
author: kubeupgrade.storage maintainers (@kubeupgrade)
extends_documentation_fragment:
  - kubeupgrade.storage.connection
  - kubeupgrade.storage.connection.endpoints
  - kubeupgrade.storage.attributes.action_group
options:
  resources:
    description:
      - Resources to keep records for, by kubectl-style name (C(pods), C(deployments.apps)). Default is every
        persisted resource any endpoint reports.
      - With O(state=present), a name that no apiserver serves (every apiserver answered, with
        complete discovery of its group) is an error naming the closest names and the apiservers asked; nothing is
        written. The StorageState CRD's own C(storagestates.migration.k8s.io) is not refused while O(install_crd) may
        install it.
    type: list
    elements: str
    default: []
  install_crd:
    description:
      - Install the C(storagestates.migration.k8s.io) CRD when it is missing. With V(false) a missing CRD is an error.
    type: bool
    default: true
  heartbeat_interval:
    description:
      - Seconds after which an unchanged record's C(lastHeartbeatTime) is refreshed anyway. A record that would
        not change otherwise is not written before then, so a re-run writes nothing.
      - Right after a run, every record it looked at has a C(lastHeartbeatTime) younger than O(heartbeat_interval), and
        never later than the run that last wrote it. So a
        O(kubeupgrade.storage.storage_version_check#module:record_max_age) of at least O(heartbeat_interval) keeps
        trusting the records each run looks at, and still distrusts a record nobody looked at for longer.
    type: int
    default: 600
  state:
    description:
      - V(present) keeps the records up to date (the default).
      - V(absent) removes records. With O(resources), exactly those records; without, every record of a resource
        that no apiserver serves and no CRD defines any more (a record left from an earlier release, which the
        pre-flight skips and which makes nothing else fail). Removing the record of a resource that is still served
        makes its verdict C(unknown) until the next migration - fail closed, never unsafe.
      - Removal needs every apiserver to answer with complete discovery; otherwise nothing is removed.
    type: str
    choices: [present, absent]
    default: present
  audit:
    description:
      - The registered result of M(kubeupgrade.storage.storage_version_audit). With it, each record the audit
        measured is set from what etcd really holds instead of being remembered - C(persistedStorageVersionHashes)
        becomes exactly the storage version hashes found, or C([current]) when nothing else (or nothing) is stored;
        C(Unknown) stays when some stored value could not be read. The record is annotated with when
        (C(storage.kubeupgrade.io/measured-at), the audit's C(measured_at)) and where
        (C(storage.kubeupgrade.io/measured-from), the etcd endpoint and prefix) it was measured.
      - A later audit that finds what the record already says (the same persisted and current hashes, the same hashes
        per apiserver) does not rewrite it - each audited pre-flight would otherwise rewrite every record. The record
        keeps the C(lastHeartbeatTime) and the measured-at and measured-from of the audit that last wrote it until its
        C(lastHeartbeatTime) is O(heartbeat_interval) old; the next such audit then writes them together, from itself.
        A record whose hashes the audit finds changed is written at once.
      - A hash that an apiserver reports now but that etcd did not hold is kept (objects may be written in it after the
        measurement, while apiservers disagree). A record already set from a later audit is not set from an older one
        (compared with the measured-at the record carries - an audit that only confirmed it is not remembered).
      - A resource the audit did not measure keeps the usual bookkeeping (C(Unknown) for a new record) - when the audit
        was limited to some O(kubeupgrade.storage.storage_version_audit#module:resources), or found keys outside the
        apiserver's key layout (they might belong to it).
      - The value is checked before any request; anything that is not a successful audit result is an error.
      - Only with O(state=present).
    type: raw
attributes:
  check_mode:
    description: Reports which records would be created or updated and writes nothing.
    support: full
  diff_mode:
    description: Returns the status of each changed record before and after.
    support: full
"""

EXAMPLES = r"""
- name: Record the storage versions every apiserver reports before the upgrade
  kubeupgrade.storage.storage_state:
    endpoints:
      - https://10.0.0.11:6443
      - https://10.0.0.12:6443
      - https://10.0.0.13:6443

- name: Remove the records of resources that no apiserver serves any more (left from an earlier release)
  kubeupgrade.storage.storage_state:
    state: absent

- name: Measure what etcd holds (on a control-plane node holding etcd client certificates)
  kubeupgrade.storage.storage_version_audit:
    etcd_endpoints: [https://127.0.0.1:2379]
    etcd_ca_cert: /etc/kubernetes/pki/etcd/ca.crt
    etcd_client_cert: /etc/kubernetes/pki/apiserver-etcd-client.crt
    etcd_client_key: /etc/kubernetes/pki/apiserver-etcd-client.key
  become: true
  register: audit

- name: Set the records from the measurement instead of starting them as Unknown
  kubeupgrade.storage.storage_state:
    audit: "{{ audit }}"

- name: Only two resources, without installing the CRD
  kubeupgrade.storage.storage_state:
    resources: [deployments.apps, widgets.example.com]
    install_crd: false
"""

RETURN = r"""
records:
  description: One entry per resource.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Resource name, which is also the StorageState name.
      type: str
      sample: deployments.apps
    action:
      description: C(created), C(updated), C(unchanged) or, with O(state=absent), C(removed) (in check mode - what would be done).
      type: str
      sample: created
    before:
      description:
        - The record's status before (and its observed-hashes annotation as C(observed_hashes), and when set from an
          audit C(measured_at) and C(measured_from)); null when it did not exist.
      type: dict
      sample: null
    after:
      description: The record's status after.
      type: dict
      sample: {"status": {"persistedStorageVersionHashes": ["Unknown", "8aSe+NMegvE="],
               "currentStorageVersionHash": "8aSe+NMegvE=", "lastHeartbeatTime": "2026-11-21T15:00:00Z"}}
    reasons:
      description: Why the record changes, in operator words.
      type: list
      elements: str
      sample: ["no StorageState yet: objects written before now may be in any version, so persisted starts as Unknown"]
crd_installed:
  description: Whether the StorageState CRD was (or in check mode would be) installed by this run.
  returned: always
  type: bool
  sample: false
unreachable_endpoints:
  description: Endpoints that were not observed; their hashes could not be recorded.
  returned: always
  type: list
  elements: str
  sample: []
diff:
  description: Before and after of every changed record, by name (diff mode only).
  returned: when diff mode is on
  type: dict
  sample: {"before": {"deployments.apps": null}, "after": {"deployments.apps": {"status": {}}}}
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return {
        "resources": {"type": "list", "elements": "str", "default": []},
        "install_crd": {"type": "bool", "default": True},
        "heartbeat_interval": {"type": "int", "default": 600},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "audit": {"type": "raw"},
    }


def main() -> None:
    KubeUpgradeModule(argument_spec(), empty_result=runner.EMPTY_RESULT, supports_check_mode=True).run(runner.run)


if __name__ == "__main__":
    main()

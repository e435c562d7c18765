#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Report the storage version of every persisted resource, per apiserver endpoint."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_version_info
short_description: Report storage versions per apiserver, CRD storedVersions and StorageState records
description:
  - Queries every apiserver endpoint directly and reports, for every persisted resource, the storage version hash
    from legacy discovery, the version that hash stands for, and the served versions; plus each endpoint's
    C(/version) and readiness, and whether all endpoints agree.
  - Each group/version discovery document is fetched once per endpoint, concurrently, over one connection pool.
  - An endpoint that does not answer or refuses the credentials is reported with the HTTP status, never skipped.
  - Also reports CRDs with C(status.storedVersions), StorageState records (C(migration.k8s.io/v1alpha1)),
    StorageVersion objects (C(internal.apiserver.k8s.io/v1alpha1), only when served) and apiserver identity Leases.
  - Never writes to the cluster.
author: kubeupgrade.storage maintainers (@kubeupgrade)
extends_documentation_fragment:
  - kubeupgrade.storage.connection
  - kubeupgrade.storage.connection.endpoints
  - kubeupgrade.storage.attributes.read_only
  - kubeupgrade.storage.attributes.action_group
options:
  resources:
    description:
      - Resources to report, by kubectl-style name (C(pods), C(deployments.apps), C(widgets.example.com)).
      - Only the groups of these resources are discovered. Default is every persisted resource.
      - A name that no apiserver serves and no CRD defines (every apiserver answered, with complete discovery of its
        group) is an error naming the closest names and the apiservers asked.
    type: list
    elements: str
    default: []
  include:
    description:
      - Cluster-wide records to read besides discovery. With O(discovery), CRDs are always read for the reverse hash
        lookup of custom resources; leave out C(crds) to omit them from the result.
    type: list
    elements: str
    choices: [crds, storage_states, storage_versions, leases]
    default: [crds, storage_states, storage_versions, leases]
  discovery:
    description:
      - Discover each apiserver's resources and their storage versions, and read the cluster-wide records of O(include).
      - V(false) observes each apiserver's identity and readiness alone - C(/version), C(/readyz), C(/api) and C(/apis),
        four requests an apiserver (discovery adds one per group/version, and the cluster-wide records). For a wait on
        O(expect_ready) and O(expect_release) after a restart, which then asks little of an apiserver still starting,
        and returns a few hundred bytes a poll.
      - With V(false), O(resources) must be empty; RV(resources), each endpoint's C(resources) and the records are
        empty, RV(storage_state_crd_installed) and RV(storage_version_api_served) are V(false) (not read), and
        RV(agreed) is V(false) (nothing was compared).
    type: bool
    default: true
  expect_ready:
    description:
      - Expect every endpoint to be ready (C(/readyz) answers 200); RV(as_expected) says whether it is.
      - For a wait after a host is upgraded or rolled back - C(until) on RV(as_expected), C(failed_when) on its negation.
    type: bool
    default: false
  expect_release:
    description:
      - Expect every endpoint to run this minor release (as RV(endpoints[].release) reports it, such as C("1.33"),
        quoted); RV(as_expected) says whether it does. An apiserver whose binary is of that release but emulates an
        older one (RV(endpoints[].emulated_release)) does not yet. Empty - any release.
    type: str
  expect_emulated_release:
    description:
      - With O(expect_release), expect every endpoint to run that binary at this emulated release (C(--emulated-version),
        compatibility versions, KEP-4330), such as C("1.35") after step 1 of a two-step upgrade to 1.36. Empty - the
        binary at its own release.
    type: str
  two_step_to:
    description:
      - The target release of a two-step upgrade (compatibility versions, KEP-4330). RV(two_step) then says which step
        comes next from what the apiservers run - step 1, the target binary emulating the release they run now; step 2,
        the target at its own release once every apiserver runs its binary; 0, done. A plane in the middle of a
        one-step roll is refused. The same decision as P(kubeupgrade.storage.storage_version_check#module)'s
        C(upgrade_strategy=two_step), before anything is judged (the rehearsal of step 1 needs the emulated release).
    type: str
"""

EXAMPLES = r"""
- name: Observe the storage versions on all three apiservers
  kubeupgrade.storage.storage_version_info:
    kubeconfig: ~/.kube/config
    endpoints:
      - https://10.0.0.11:6443
      - https://10.0.0.12:6443
      - https://10.0.0.13:6443
  register: storage

- name: Stop when the apiservers do not agree
  ansible.builtin.assert:
    that: storage.agreed
    fail_msg: "Storage versions differ: {{ storage.resources | dict2items | rejectattr('value.agreed') | map(attribute='key') | list }}"

- name: Wait until the upgraded apiserver is ready and runs 1.33
  kubeupgrade.storage.storage_version_info:
    endpoints: [https://10.0.0.11:6443]
    discovery: false  # its identity and readiness alone: four requests a poll
    expect_ready: true
    expect_release: "1.33"
  register: upgraded
  until: upgraded.as_expected
  retries: 60
  delay: 5
  failed_when: not upgraded.as_expected

- name: Only deployments and a custom resource, without StorageVersion objects
  kubeupgrade.storage.storage_version_info:
    resources: [deployments.apps, widgets.example.com]
    include: [crds, storage_states]
"""

RETURN = r"""
two_step:
  description:
    - With O(two_step_to), the next step of the two-step upgrade - C(step) (1, 2, or 0 when every apiserver already
      runs the target at its own release), C(emulated_release) (what the target binary emulates in step 1, else null),
      C(current_release) and C(msg).
  returned: when O(two_step_to) is given
  type: dict
  sample: {"step": 1, "emulated_release": "1.35", "current_release": "1.35", "msg": "step 1 of 2: ..."}
endpoints:
  description: What each apiserver endpoint reported, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    endpoint:
      description: Base URL of the apiserver.
      type: str
      sample: https://10.0.0.11:6443
    reachable:
      description: Whether the endpoint answered discovery with our credentials.
      type: bool
      sample: true
    error:
      description: Why the endpoint is unreachable or incomplete (names the endpoint and HTTP status), else null.
      type: str
      sample: "apiserver https://10.0.0.12:6443 rejected the credentials (HTTP 401): ..."
    status:
      description: HTTP status of the failure, if any.
      type: int
      sample: 401
    git_version:
      description: C(gitVersion) from C(/version).
      type: str
      sample: v1.32.0
    release:
      description: The minor release derived from C(git_version) (the binary's release).
      type: str
      sample: "1.32"
    emulated_release:
      description:
        - The release the binary emulates (C(--emulated-version), compatibility versions, KEP-4330), from
          C(emulationMajor)/C(emulationMinor) in C(/version); equal to RV(endpoints[].release) when the binary runs its
          own release, null where the apiserver reports none (releases before 1.31).
        - A binary emulating an older release serves and stores as that release - O(expect_release) and the rolling
          upgrade's check count it as at a release only when both are that release.
      type: str
      sample: "1.35"
    min_compatibility_release:
      description: The oldest release that must read what this apiserver stores (C(minCompatibilityMajor)/C(minCompatibilityMinor)
        in C(/version)), null where the apiserver reports none.
      type: str
      sample: "1.34"
    ready:
      description: Whether C(/readyz) answered 200.
      type: bool
      sample: true
    failed_groups:
      description: Group/versions whose discovery document could not be fetched.
      type: list
      elements: str
      sample: []
    resources:
      description: Per persisted resource, its storage hash, decoded storage version (null if unknown) and served versions.
      type: dict
      sample: {"deployments.apps": {"hash": "8aSe+NMegvE=", "storage_version": "v1", "served_versions": ["v1"]}}
resources:
  description: Per resource, the hash and decoded version on each reachable endpoint and whether every endpoint agrees.
  returned: always
  type: dict
  sample:
    deployments.apps:
      hashes: {"https://10.0.0.11:6443": "8aSe+NMegvE=", "https://10.0.0.12:6443": "8aSe+NMegvE="}
      storage_versions: {"https://10.0.0.11:6443": "v1", "https://10.0.0.12:6443": "v1"}
      agreed: true
agreed:
  description: True when every endpoint is reachable and complete and reports the same hash for every resource; false
    with O(discovery=false), which compares nothing.
  returned: always
  type: bool
  sample: true
unreachable_endpoints:
  description: Endpoints that did not answer, refused the credentials, or whose discovery was incomplete.
  returned: always
  type: list
  elements: str
  sample: []
unready:
  description: Reachable endpoints whose C(/readyz) did not answer 200.
  returned: always
  type: list
  elements: str
  sample: []
crds:
  description: CRDs by name, with versions and C(status.storedVersions). Empty unless O(include) has C(crds).
  returned: always
  type: dict
  sample: {"widgets.example.com": {"group": "example.com", "storage_version": "v1", "stored_versions": ["v1alpha1", "v1"]}}
storage_states:
  description: StorageState records by resource name. Empty unless O(include) has C(storage_states).
  returned: always
  type: dict
  sample: {"deployments.apps": {"persisted_hashes": ["8aSe+NMegvE="], "current_hash": "8aSe+NMegvE=",
           "last_heartbeat": "2026-11-21T14:21:47Z"}}
storage_state_crd_installed:
  description: Whether the StorageState CRD (C(storagestates.migration.k8s.io)) is installed; V(false) with O(discovery=false) (not read).
  returned: always
  type: bool
  sample: true
storage_versions:
  description: StorageVersion objects by name (C(apps.deployments)), when the API is served and requested.
  returned: always
  type: dict
  sample: {"apps.deployments": {"common_encoding_version": "apps/v1", "entries": [{"api_server_id": "apiserver-abc",
           "encoding_version": "apps/v1", "decodable_versions": ["apps/v1", "apps/v1beta2"], "served_versions": ["apps/v1"]}]}}
storage_version_api_served:
  description: Whether C(internal.apiserver.k8s.io/v1alpha1) is served; V(false) with O(discovery=false) (not read).
  returned: always
  type: bool
  sample: false
as_expected:
  description:
    - Whether every endpoint is reachable and as O(expect_ready) and O(expect_release) say (with neither - reachable).
      V(false) also when the module fails (no apiserver answered).
  returned: always
  type: bool
  sample: true
expectation_msg:
  description: Each endpoint's readiness and release, and what was expected; empty when the module failed before observing.
  returned: always
  type: str
  sample: "https://10.0.0.11:6443: ready, release 1.33 (as expected: ready, release 1.33)"
identity_leases:
  description: kube-apiserver identity Leases in C(kube-system).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "apiserver-wlv32tlttr4jl3gtroqexyxapa", "hostname": "vm", "holder_identity": "apiserver-wlv..._2856c1dd",
            "renew_time": "2026-11-21T14:19:31.852662Z"}]
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return {
        "resources": {"type": "list", "elements": "str", "default": []},
        "include": {"type": "list", "elements": "str", "choices": list(runner.INCLUDE_CHOICES), "default": list(runner.INCLUDE_CHOICES)},
        "expect_ready": {"type": "bool", "default": False},
        "expect_release": {"type": "str"},
        "expect_emulated_release": {"type": "str"},
        "two_step_to": {"type": "str"},
        "discovery": {"type": "bool", "default": True},
    }


def main() -> None:
    KubeUpgradeModule(argument_spec(), empty_result=runner.EMPTY_RESULT, supports_check_mode=True).run(runner.run)


if __name__ == "__main__":
    main()

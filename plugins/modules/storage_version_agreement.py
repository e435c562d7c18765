#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until every apiserver reports the same storage versions."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_version_agreement
short_description: Wait until every apiserver reports the same storage versions
description:
  - Polls every apiserver endpoint's legacy discovery until O(polls) consecutive polls see the same storage version
    hash for every resource on every endpoint (and, with O(require_ready), every endpoint ready).
  - A storage migration run while apiservers disagree is undone by the apiservers still writing the old version,
    so gate migrations and each step of a rolling upgrade on this.
  - Fails at O(timeout) naming every disagreeing resource with the version and hash each endpoint reports, and the
    unready or unreachable endpoints.
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
      - Resources that must agree, by kubectl-style name. Default is every persisted resource.
    type: list
    elements: str
    default: []
  polls:
    description:
      - Consecutive agreeing polls (with the same hashes) required.
    type: int
    default: 2
  interval:
    description:
      - Seconds between polls.
    type: float
    default: 5.0
  timeout:
    description:
      - Seconds to wait for agreement before failing.
    type: float
    default: 300.0
  require_ready:
    description:
      - Also require every endpoint's C(/readyz) to answer 200.
    type: bool
    default: true
  accept:
    description:
      - Subjects the operator accepts, each with a reason, as for M(kubeupgrade.storage.storage_version_check). An
        accepted group/version whose discovery fails (an APIService without a backend, which stores nothing in this
        etcd) does not stop agreement; other subjects (resources, apiservers) do not change it.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Wait until the three apiservers agree before migrating
  kubeupgrade.storage.storage_version_agreement:
    endpoints:
      - https://10.0.0.11:6443
      - https://10.0.0.12:6443
      - https://10.0.0.13:6443
    polls: 3
    interval: 2
    timeout: 600

- name: Only the resources about to be migrated
  kubeupgrade.storage.storage_version_agreement:
    resources: [flowschemas.flowcontrol.apiserver.k8s.io]
"""

RETURN = r"""
agreed:
  description: True when agreement was reached (always true on success).
  returned: always
  type: bool
  sample: true
polls_observed:
  description: How many polls were made.
  returned: always
  type: int
  sample: 2
hashes:
  description: The last poll's hash per resource and endpoint.
  returned: always
  type: dict
  sample: {"deployments.apps": {"https://10.0.0.11:6443": "8aSe+NMegvE=", "https://10.0.0.12:6443": "8aSe+NMegvE="}}
storage_versions:
  description:
    - The storage version of each resource every endpoint agreed on in the last poll, the hash mapped back to its version
      (a hash that maps to no known version leaves its resource out).
    - Given to M(kubeupgrade.storage.storage_version_audit) as
      O(kubeupgrade.storage.storage_version_audit#module:readable_versions), the audit lists every object stored in another
      version, which M(kubeupgrade.storage.storage_migration) then rewrites alone with
      O(kubeupgrade.storage.storage_migration#module:objects_from_audit) (what the migrate role does with etcd settings).
  returned: always
  type: dict
  sample: {"deployments.apps": "v1", "widgets.example.com": "v2"}
disagreeing:
  description: Resources whose endpoints report different hashes in the last poll.
  returned: always
  type: list
  elements: dict
  sample: [{"resource": "deployments.apps", "endpoints": {"https://10.0.0.11:6443": "8aSe+NMegvE=", "https://10.0.0.12:6443": "other=="}}]
unready:
  description: Endpoints whose C(/readyz) did not answer 200 in the last poll.
  returned: always
  type: list
  elements: str
  sample: []
unreachable_endpoints:
  description: Endpoints that did not answer in the last poll.
  returned: always
  type: list
  elements: str
  sample: []
failed_group_versions:
  description:
    - Group/versions whose discovery failed in the last poll (aggregated and accepted ones left out), each with the
      apiservers it failed on. Empty on success.
  returned: always
  type: dict
  sample: {"example.com/v1": ["https://10.0.0.11:6443"]}
waiting_helps:
  description:
    - Whether waiting longer may bring agreement. V(false) when only a failed discovery kept agreement from being
      established for the whole O(timeout) - it does not heal by itself, so a retry loop can stop at once.
  returned: always
  type: bool
  sample: true
endpoints:
  description:
    - Per endpoint in the last poll - reachable, error (with the HTTP status), release, ready, failed group/versions.
    - Lets a play learn the release the apiservers run without observing them again.
  returned: always
  type: list
  elements: dict
  sample: [{"endpoint": "https://10.0.0.11:6443", "reachable": true, "error": null, "status": null, "release": "1.33",
            "git_version": "v1.33.2", "ready": true, "failed_groups": []}]
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import agreement_runner as runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return {
        "resources": {"type": "list", "elements": "str", "default": []},
        "polls": {"type": "int", "default": 2},
        "interval": {"type": "float", "default": 5.0},
        "timeout": {"type": "float", "default": 300.0},
        "require_ready": {"type": "bool", "default": True},
        "accept": {"type": "dict", "default": {}},
    }


EMPTY_RESULT = {"agreed": False, "polls_observed": 0, "hashes": {}, "storage_versions": {}, "disagreeing": [], "unready": [], "unreachable_endpoints": [],
                "endpoints": [], "failed_group_versions": {}, "waiting_helps": True}


def main() -> None:
    KubeUpgradeModule(argument_spec(), empty_result=EMPTY_RESULT, supports_check_mode=True).run(runner.run)


if __name__ == "__main__":
    main()

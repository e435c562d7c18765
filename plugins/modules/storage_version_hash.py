#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compute a storage version hash, or find which version a hash stands for."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_version_hash
short_description: Compute a Kubernetes storage version hash, or map one back to its API version
description:
  - Computes the C(storageVersionHash) that an apiserver's legacy discovery reports for a resource stored as
    O(group)/O(version)/O(kind), exactly as the apiserver does (SHA-256 of C(<group>/<version>/<kind>), first 8 bytes,
    base64; the core group is empty, so C(/v1/Pod)).
  - With O(hash), does the reverse and finds which of the candidate versions the hash stands for. Candidates are
    O(candidates), and/or every version the release data has for O(resource) (in O(release) only, when given).
  - The hash is opaque by design, so the only way back is to hash every candidate. A hash that matches no candidate
    returns RV(version=null), which callers must treat as unknown, never as safe.
  - Runs on the target host without contacting any cluster; takes no connection options.
author: kubeupgrade.storage maintainers (@kubeupgrade)
options:
  group:
    description:
      - API group the storage version belongs to; empty for the core group.
      - Defaults to the storage group of O(resource) when that is given (C(events.events.k8s.io) is stored, and
        hashed, as core C(v1) Event), else to the empty core group.
    type: str
  version:
    description:
      - Storage version to hash, such as C(v1) or C(v1beta3).
      - With O(resource) and O(release) and without O(hash), defaults to that release's storage version.
    type: str
  kind:
    description:
      - Kind of the resource, such as C(Deployment). Defaults to the kind of O(resource) in the release data.
    type: str
  hash:
    description:
      - A C(storageVersionHash) to map back to a version (reverse lookup). V(Unknown) never maps.
    type: str
  candidates:
    description:
      - Versions to try for the reverse lookup, besides those from O(resource).
    type: list
    elements: str
    default: []
  resource:
    description:
      - Resource by kubectl-style name (C(deployments.apps), C(pods)), to take group, kind and candidate versions from
        the release data.
    type: str
  release:
    description:
      - Kubernetes release (C(1.32), C(v1.32.4)) whose profile of O(resource) is used; default every release.
    type: str
  profiles_file:
    description:
      - YAML or JSON file adding or overriding release profiles; format in the collection's
        C(plugins/module_utils/profiles.py) documentation.
    type: path
  profiles:
    description:
      - The same structure as O(profiles_file), inline; applied after the file.
    type: dict
attributes:
  check_mode:
    description: Nothing changes, so the module runs normally in check mode.
    support: full
  diff_mode:
    description: Nothing changes, so there is no diff.
    support: none
notes:
  - The filters P(kubeupgrade.storage.storage_version_hash#filter) and P(kubeupgrade.storage.storage_version_lookup#filter)
    do the same inside templates.
seealso:
  - plugin: kubeupgrade.storage.storage_version_hash
    plugin_type: filter
  - module: kubeupgrade.storage.storage_version_info
"""

EXAMPLES = r"""
- name: Hash of core v1 Pod
  kubeupgrade.storage.storage_version_hash:
    version: v1
    kind: Pod
  register: pod_hash
  # pod_hash.hash == "xPOwRZ+Yhw8="

- name: Which flowcontrol version is persisted?
  kubeupgrade.storage.storage_version_hash:
    hash: 9NnFrw7ZEmA=
    resource: flowschemas.flowcontrol.apiserver.k8s.io
  register: found
  # found.version == "v1beta3", found.api_version == "flowcontrol.apiserver.k8s.io/v1beta3"

- name: Reverse lookup of a custom resource among its CRD versions
  kubeupgrade.storage.storage_version_hash:
    hash: gIwvi5rymmg=
    group: example.com
    kind: Widget
    candidates: [v1alpha1, v1, v2]

- name: The storage hash of deployments in Kubernetes 1.32
  kubeupgrade.storage.storage_version_hash:
    resource: deployments.apps
    release: "1.32"
"""

RETURN = r"""
hash:
  description: The storage version hash computed, or the one given for a reverse lookup.
  returned: always
  type: str
  sample: xPOwRZ+Yhw8=
version:
  description: The version the hash stands for; null when it matches no candidate (treat as unknown).
  returned: always
  type: str
  sample: v1beta3
api_version:
  description: C(<group>/<version>), or C(<version>) for the core group; null when O(version) is unknown.
  returned: always
  type: str
  sample: flowcontrol.apiserver.k8s.io/v1beta3
group:
  description: The group that was hashed (the storage group).
  returned: always
  type: str
  sample: apps
kind:
  description: The kind that was hashed.
  returned: always
  type: str
  sample: Deployment
candidates:
  description: The versions tried in a reverse lookup, oldest first.
  returned: when O(hash) is given
  type: list
  elements: str
  sample: [v1beta1, v1beta2, v1beta3, v1]
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._hash import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return dict(
        group=dict(type="str"),
        version=dict(type="str"),
        kind=dict(type="str"),
        hash=dict(type="str"),
        candidates=dict(type="list", elements="str", default=[]),
        resource=dict(type="str"),
        release=dict(type="str"),
        profiles_file=dict(type="path"),
        profiles=dict(type="dict"),
    )


def main() -> None:
    KubeUpgradeModule(argument_spec(), connection=False, empty_result=runner.EMPTY_RESULT, supports_check_mode=True).run(runner.run)


if __name__ == "__main__":
    main()

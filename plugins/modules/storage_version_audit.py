#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read what every object in etcd is really stored as."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_version_audit
short_description: Report the API version every object in etcd is really stored in
description:
  - Reads every key under the kube-apiserver's etcd prefix with paged, read-only range requests and decodes, per value,
    the apiVersion and kind it is stored as (the C(k8s\x00) protobuf envelope, JSON, or a value encrypted at rest).
  - Reports, per resource, the number of objects, the count per stored apiVersion with the storage version hash the
    apiserver advertises for it and the names of its objects, the count per encryption provider and key, and with
    O(target_release) or O(readable_versions) the names of the objects a target apiserver could not decode.
  - The names per stored version (at most O(names_limit) each) are evidence for any target -
    M(kubeupgrade.storage.storage_version_check) computes from them which objects its own target cannot decode, so one
    audit judges an upgrade and its rollback. The CustomResourceDefinitions read in etcd are recorded too, so that
    custom resources can be judged from the audit alone, with no apiserver (O(kubeupgrade.storage.storage_version_check#module:offline)).
  - This is measured fact, where StorageState records can only say C(Unknown) before a full migration has run. Feed
    the result to C(storage_state), C(storage_version_check) and C(storage_migration).
  - Values that cannot be read (garbage, or encrypted with a key that was not given) are counted as unreadable, never
    as stored in any version. Keys that fit no resource of the apiserver's key layout are reported, not guessed.
author: kubeupgrade.storage maintainers (@kubeupgrade)
options:
  etcd_endpoints:
    required: true
  etcd_prefix:
    description:
      - The kube-apiserver's C(--etcd-prefix). C(/registry) and C(/registry/) read the same keys.
    type: str
    default: /registry
  page_size:
    description:
      - Keys per range request (1 to 10000). Smaller pages keep each response, and etcd's work per request, small.
    type: int
    default: 1000
  pages_per_second:
    description:
      - Throttle - at most O(page_size) x O(pages_per_second) keys per second (shorter answers pause in proportion);
        C(0) reads as fast as etcd answers.
      - The default reads at most 20,000 keys per second once the first O(burst_pages) pages are read - a 1M-key store
        in about a minute, well inside the apiserver's 5-minute compaction interval; measured over gRPC on 2 cores,
        etcd spent about 9% of one core on it.
    type: float
    default: 20
  burst_pages:
    description:
      - Pages read as fast as etcd answers before O(pages_per_second) applies (a token bucket, as client-go's QPS and
        burst - the bucket refills at O(pages_per_second) and holds at most this many pages).
      - The default, 50 pages of the default O(page_size), reads a store of up to 50,000 keys at etcd's own pace - on
        2 cores 53,000 keys in 0.3 s, for 0.2 s of etcd CPU, less than a kube-apiserver takes from etcd as it starts
        and lists every resource into its watch cache - and a larger one at the throttle's rate after that.
      - C(0) paces every page from the first.
    type: int
    default: 50
  encryption_config:
    description:
      - The kube-apiserver's C(--encryption-provider-config) file (an EncryptionConfiguration), to decrypt values
        encrypted at rest with aescbc, aesgcm or secretbox locally and read their apiVersion.
      - Without it, encrypted values are counted per provider and key name, as unreadable.
    type: path
  resources:
    description:
      - Only these resources (kubectl-style names such as C(deployments.apps), C(pods), C(widgets.example.com)).
        Default all. Other keys are still read (one range scan) but not decoded.
    type: list
    elements: str
  target_release:
    description:
      - A Kubernetes release (C(1.33)) whose apiserver must decode what is stored; the objects it could not decode are
        counted and named per resource. Custom resources are judged with O(target_crds) or O(readable_versions).
    type: str
  target_crds:
    description:
      - Target CRD manifests (paths of files or directories, inline YAML, or dictionaries, as for
        M(kubeupgrade.storage.storage_version_check)). Objects of a custom resource stored in a version its target manifest
        does not list are named as the target cannot decode them, so the object-level migration covers them too.
    type: list
    elements: raw
    default: []
  readable_versions:
    description:
      - Versions a target can decode, per resource (a mapping such as C(widgets.example.com) to C([v1]), or to one version
        C(v1)); adds to and overrides O(target_release). With each resource's current storage version (the
        RV(kubeupgrade.storage.storage_version_agreement#module:storage_versions) of an agreement), it lists the objects a
        migration must rewrite.
    type: dict
  profiles_file:
    description:
      - YAML or JSON file adding or overriding release profiles for O(target_release).
    type: path
  profiles:
    description:
      - The same structure as O(profiles_file), inline.
    type: dict
  names_limit:
    description:
      - How many object names each list returns (per resource, and per stored version of each resource); C(-1) returns
        every name (for an object-level migration), C(0) none.
      - With C(-1), each stored version still keeps at most 1000 names (RV(version_names_limit)), so the result stays
        bounded whatever the number of objects; the lists of what O(target_release) cannot decode keep every name.
    type: int
    default: 20
extends_documentation_fragment:
  - kubeupgrade.storage.etcd
  - kubeupgrade.storage.attributes.read_only
notes:
  - Safe on a live cluster. It sends only range requests of at most O(page_size) keys, pinned to the revision of the
    first page so the scan is one consistent snapshot that never blocks writers, at most O(page_size) x
    O(pages_per_second) keys per second once the first O(burst_pages) pages are read, each bounded to a window of the
    key space so that etcd does not walk the rest of the prefix for every page. It never writes to etcd.
  - It needs read access to etcd, which on kubeadm clusters means running on a control-plane node (or with a copy of
    the apiserver's etcd client certificate). Managed clusters give no etcd access; use a migration and StorageState
    records there.
  - Encryption keys from O(encryption_config) stay in the module's memory to decrypt locally; they, values and
    decrypted contents are never logged or returned. KMS v1/v2 values are reported by plugin name, never decrypted.
  - etcd is read through its gRPC API (C(etcdserverpb.KV/Range), and C(Maintenance/Status) for RV(etcd_space), what
    C(etcdctl) uses) with the Python packages grpcio and protobuf (the collection's C(requirements.txt)); where a member
    does not speak gRPC to it (no HTTP/2, a proxy) or with O(etcd_validate_certs=false) against https (grpcio always
    verifies), through etcd's JSON gateway (C(POST /v3/kv/range), C(/v3/maintenance/status)) with urllib3, which costs
    etcd about 6 times the CPU per key. Either way the values are decoded with protobuf's messages (the package
    protobuf), since kube-apiserver stores every built-in object as protobuf.
  - Decrypting secretbox values needs the Python package PyNaCl; aescbc and aesgcm need cryptography.
seealso:
  - module: kubeupgrade.storage.storage_state
  - module: kubeupgrade.storage.storage_version_check
  - module: kubeupgrade.storage.storage_migration
"""

EXAMPLES = r"""
- name: Audit etcd from the first kubeadm control-plane node
  kubeupgrade.storage.storage_version_audit:
    etcd_endpoints: ["https://127.0.0.1:2379"]
    etcd_ca_cert: /etc/kubernetes/pki/etcd/ca.crt
    etcd_client_cert: /etc/kubernetes/pki/apiserver-etcd-client.crt
    etcd_client_key: /etc/kubernetes/pki/apiserver-etcd-client.key
    target_release: "1.33"
    readable_versions:
      widgets.example.com: [v1]
  become: true
  register: audit

- name: Show what a 1.33 apiserver could not decode
  ansible.builtin.debug:
    msg: "{{ audit.resources | dict2items | selectattr('value.not_readable') | map(attribute='value.summary') | list }}"

- name: Decrypt secrets encrypted at rest, gently
  kubeupgrade.storage.storage_version_audit:
    etcd_endpoints: ["https://10.0.0.11:2379", "https://10.0.0.12:2379"]
    etcd_ca_cert: /etc/kubernetes/pki/etcd/ca.crt
    etcd_client_cert: /etc/kubernetes/pki/apiserver-etcd-client.crt
    etcd_client_key: /etc/kubernetes/pki/apiserver-etcd-client.key
    encryption_config: /etc/kubernetes/enc/encryption-config.yaml
    resources: [secrets]
    page_size: 200
    pages_per_second: 5
  become: true
"""

RETURN = r"""
etcd_space:
  description:
    - The member's C(db_size) and C(db_size_in_use) (its status) and its space C(quota) (the
      C(etcd_server_quota_backend_bytes) gauge of its C(/metrics) on the client URL), in bytes; each null when not read.
      What M(kubeupgrade.storage.storage_migration) with O(kubeupgrade.storage.storage_migration#module:objects_from_audit)
      checks its rewrites against.
  returned: success
  type: dict
  sample: {db_size: 104857600, db_size_in_use: 81920000, quota: 2147483648}
summary:
  description: One line over the whole scan.
  returned: success
  type: str
  sample: "269 keys: 267 objects of 18 resources, 0 unreadable, 0 outside the key layout"
resources:
  description:
    - Per resource (kubectl-style name), what is stored. C(objects) and C(bytes) (the stored values as etcd holds them);
      C(versions) lists each stored apiVersion with its kind, count, C(bytes), storage version hash and C(names) (the
      first O(names_limit) objects stored in it); C(hashes) those hashes;
      C(encryption) counts per C(identity) or C(<provider>:<key name>); C(unreadable), C(unreadable_names) and
      C(unreadable_reasons) the values that could not be read, of which C(undecodable) and C(undecodable_names) are
      neither an envelope, JSON nor encrypted (no apiserver decodes them, no migration rewrites them); C(judged) whether readable versions were known for it;
      then C(readable_versions), C(not_readable) and C(not_readable_names) (for O(target_release) only).
  returned: success
  type: dict
  sample:
    widgets.example.com:
      group: example.com
      resource: widgets
      objects: 55
      versions:
        - {api_version: example.com/v1, kind: Widget, count: 5, hash: "gIwvi5rymmg=", names: [scen-a/w-50, scen-a/w-51]}
        - {api_version: example.com/v1alpha1, kind: Widget, count: 50, hash: "aXSEt3iQTdQ=", names: [scen-a/w-00, scen-a/w-01]}
      hashes: ["aXSEt3iQTdQ=", "gIwvi5rymmg="]
      encryption: {identity: 55}
      unreadable: 0
      unreadable_names: []
      unreadable_reasons: {}
      undecodable: 0
      undecodable_names: []
      judged: true
      readable_versions: [v1]
      not_readable: 50
      not_readable_names: [scen-a/w-00, scen-a/w-01]
      summary: "widgets.example.com: 55 objects (5 example.com/v1, 50 example.com/v1alpha1), 50 in a version the target cannot decode"
crds:
  description:
    - The CustomResourceDefinitions stored under the prefix, by name, each with C(group), C(kind), C(plural),
      C(scope), C(versions) (C(name), C(served), C(storage)), C(storage_version) and C(stored_versions)
      (C(status.storedVersions)) - what their custom resources can be judged against with no apiserver.
  returned: success
  type: dict
  sample:
    widgets.example.com:
      group: example.com
      kind: Widget
      plural: widgets
      scope: Namespaced
      versions: [{name: v1alpha1, served: true, storage: false}, {name: v1, served: true, storage: true}]
      storage_version: v1
      stored_versions: [v1alpha1, v1]
crds_unread:
  description: CustomResourceDefinitions whose stored value could not be read (encrypted at rest, not JSON), with the reason.
  returned: success
  type: list
  elements: dict
  sample: [{"name": "gadgets.example.com", "reason": "encrypted at rest (its versions cannot be read from etcd without the apiserver)"}]
target_release:
  description: The release O(target_release) named, as its profile names it (C(1.33) for C(v1.33.2)); null without it.
  returned: success
  type: str
  sample: "1.33"
names_limit:
  description: The O(names_limit) the names were kept with (a consumer can tell a cut list from a complete one).
  returned: success
  type: int
  sample: 20
version_names_limit:
  description: The names kept per stored version (C(versions[].names)) - O(names_limit), or 1000 when that is C(-1).
  returned: success
  type: int
  sample: 20
keys_scanned:
  description: Keys read under the prefix.
  returned: success
  type: int
objects:
  description: Keys that are objects of a resource (before the O(resources) filter).
  returned: success
  type: int
unreadable:
  description: Values that could not be read, over all resources.
  returned: success
  type: int
not_readable:
  description: Objects the target cannot decode, over the judged resources; null without a target.
  returned: success
  type: int
internal_keys:
  description: Counts of the apiserver's own bookkeeping keys (service IP and node port ranges, master leases).
  returned: success
  type: dict
outside_layout:
  description: Keys that fit no resource of the apiserver's key layout.
  returned: success
  type: int
outside_layout_keys:
  description: The first O(names_limit) of those keys.
  returned: success
  type: list
  elements: str
filtered_out:
  description: Object keys skipped by O(resources).
  returned: success
  type: int
endpoint:
  description: The etcd endpoint that was read.
  returned: success
  type: str
transport:
  description: How it was read - C(grpc) (etcd's gRPC API) or C(gateway) (its JSON gateway, where gRPC could not be spoken).
  returned: success
  type: str
  sample: grpc
measured_at:
  description: When the scan started (UTC); records made from the audit say when they were measured.
  returned: success
  type: str
  sample: "2026-01-01T00:00:00Z"
revision:
  description: The etcd revision the whole scan read (one snapshot).
  returned: success
  type: int
pages:
  description: Range requests made.
  returned: success
  type: int
prefix:
  description: The key prefix scanned.
  returned: success
  type: str
  sample: /registry/
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.connection_args import etcd_argument_spec
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return etcd_argument_spec(
        etcd_endpoints=dict(type="list", elements="str", required=True),
        etcd_prefix=dict(type="str", default="/registry"),
        page_size=dict(type="int", default=1000),
        pages_per_second=dict(type="float", default=20),
        burst_pages=dict(type="int", default=50),
        encryption_config=dict(type="path"),
        resources=dict(type="list", elements="str"),
        target_release=dict(type="str"),
        target_crds=dict(type="list", elements="raw", default=[]),
        readable_versions=dict(type="dict"),
        profiles_file=dict(type="path"),
        profiles=dict(type="dict"),
        names_limit=dict(type="int", default=20),
    )


def main() -> None:
    KubeUpgradeModule(argument_spec(), connection=False, supports_check_mode=True).run(runner.run)


if __name__ == "__main__":
    main()

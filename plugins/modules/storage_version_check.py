#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-flight: can the target binaries decode every storage version that is persisted?"""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_version_check
short_description: Pre-flight check that target apiserver binaries can read everything stored in etcd
description:
  - For every persisted resource, compares the storage versions objects may be persisted in (StorageState records,
    C(Unknown) when there is none; the hash every apiserver reports now; a CRD's C(status.storedVersions)) with what
    the target can decode, and returns a verdict per resource - C(safe), C(needs_migration) (migrate first, then it is
    safe), C(unsafe) (no migration helps), C(unknown) (never treated as safe; migrating resolves it) or C(removed)
    (the target no longer has the resource; export or delete its objects first).
  - The target is a Kubernetes release profile (O(target_release)), a live apiserver that already runs the target
    (O(target_endpoint)), target CRD manifests (O(target_crds)), or a combination.
  - An unreachable or unauthorised apiserver makes the affected verdicts C(unknown), never C(safe).
  - Never writes to the cluster.
author: kubeupgrade.storage maintainers (@kubeupgrade)
extends_documentation_fragment:
  - kubeupgrade.storage.connection
  - kubeupgrade.storage.connection.endpoints
  - kubeupgrade.storage.attributes.read_only
  - kubeupgrade.storage.attributes.action_group
options:
  target_release:
    description:
      - The Kubernetes release the apiservers will run, such as C("1.34") or C(v1.34.2). Quote it in YAML.
      - Must have a release profile (shipped, or added with O(profiles_file) or O(profiles)).
    type: str
  target_endpoint:
    description:
      - Base URL of an apiserver that already runs the target binary; its live discovery tells what it serves.
        Used alone, verdicts are conservative (served and storage versions only).
    type: str
  target_crds:
    description:
      - The CRD manifests that will be applied with the upgrade. Each item is a path to a YAML/JSON file (or a
        directory of them), a CRD as a dictionary, or a YAML/JSON string.
    type: list
    elements: raw
    default: []
  profiles_file:
    description:
      - A YAML or JSON file that adds or overrides release profiles (format in the collection documentation).
    type: path
  profiles:
    description:
      - Release profiles given inline, same format as O(profiles_file); applied after it.
    type: dict
  fail_on:
    description:
      - Verdicts that make the task fail. The result is returned in full either way.
    type: list
    elements: str
    choices: [needs_migration, unsafe, unknown, removed, safe]
    default: [needs_migration, unsafe, unknown, removed]
  resources:
    description:
      - Resources to check, by kubectl-style name. Default is every persisted resource.
    type: list
    elements: str
    default: []
  record_max_age:
    description:
      - Seconds after which a StorageState record whose heartbeat was not refreshed is not trusted (its resource
        is then C(unknown)). Default is to trust records of any age.
    type: int
notes:
  - At least one of O(target_release), O(target_endpoint) or O(target_crds) is required.
"""

EXAMPLES = r"""
- name: Can the 1.34 binaries read everything stored now?
  kubeupgrade.storage.storage_version_check:
    target_release: "1.34"
    endpoints:
      - https://10.0.0.11:6443
      - https://10.0.0.12:6443
      - https://10.0.0.13:6443
    target_crds:
      - files/crds/widgets.yaml

- name: Report without failing, then act on the verdicts
  kubeupgrade.storage.storage_version_check:
    target_release: "1.34"
    fail_on: []
  register: preflight

- name: Against an apiserver that already runs the new binary
  kubeupgrade.storage.storage_version_check:
    target_endpoint: https://10.0.0.11:6443
    endpoints: [https://10.0.0.12:6443, https://10.0.0.13:6443]
    fail_on: [unsafe, removed, unknown]
"""

RETURN = r"""
resources:
  description: One verdict per resource, worst first.
  returned: always
  type: list
  elements: dict
  contains:
    resource:
      description: kubectl-style resource name.
      type: str
      sample: flowschemas.flowcontrol.apiserver.k8s.io
    verdict:
      description: C(safe), C(needs_migration), C(unsafe), C(unknown) or C(removed).
      type: str
      sample: needs_migration
    reason:
      description: Why, in operator words.
      type: str
      sample: "objects may still be stored as v1beta2, which 1.34 cannot decode"
    next_step:
      description: What to do about it.
      type: str
      sample: "migrate flowschemas.flowcontrol.apiserver.k8s.io to v1beta3 with kubeupgrade.storage.storage_migration"
    persisted_hashes:
      description: The persisted hashes considered (StorageState, current hashes).
      type: list
      elements: str
      sample: ["Unknown", "9NnFrw7ZEmA="]
    persisted_versions:
      description: The versions those hashes (and CRD storedVersions) stand for.
      type: list
      elements: str
      sample: ["v1beta3"]
    unresolved_hashes:
      description: Persisted hashes that map to no known version (including C(Unknown)).
      type: list
      elements: str
      sample: ["Unknown"]
    current_versions:
      description: The storage version each endpoint reports now (null = unknown).
      type: dict
      sample: {"https://10.0.0.11:6443": "v1beta3"}
    target_storage_version:
      description: The version the target stores the resource in.
      type: str
      sample: v1
    target_decodable_versions:
      description: Every version the target can decode.
      type: list
      elements: str
      sample: ["v1beta3", "v1"]
    conservative:
      description: True when the target is known from live discovery only (served and storage versions).
      type: bool
      sample: false
    running_can_read_target:
      description: Whether the binaries still running can read what the target writes (null = cannot tell).
      type: bool
      sample: true
    target_source:
      description: What the target view of this resource came from.
      type: str
      sample: release 1.34
counts:
  description: Number of resources per verdict.
  returned: always
  type: dict
  sample: {"safe": 61, "needs_migration": 1, "unknown": 0, "removed": 0, "unsafe": 0}
verdict:
  description: The worst verdict.
  returned: always
  type: str
  sample: needs_migration
report_markdown:
  description: The verdict table in Markdown, worst first.
  returned: always
  type: str
  sample: "**Storage pre-flight: safe** ..."
endpoints:
  description: Per endpoint - reachable, error (with the HTTP status), release, ready.
  returned: always
  type: list
  elements: dict
  sample: [{"endpoint": "https://10.0.0.11:6443", "reachable": true, "error": null, "status": null, "release": "1.33", "ready": true}]
"""

from ansible_collections.kubeupgrade.storage.plugins.module_utils import verdicts
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule
from ansible_collections.kubeupgrade.storage.plugins.module_utils.observe import observe
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles
from ansible_collections.kubeupgrade.storage.plugins.module_utils.target_crds import load_target_crds

VERDICTS = [verdicts.NEEDS_MIGRATION, verdicts.UNSAFE, verdicts.UNKNOWN, verdicts.REMOVED, verdicts.SAFE]
DEFAULT_FAIL_ON = [v for v in VERDICTS if v != verdicts.SAFE]

EMPTY_RESULT = {"resources": [], "counts": {}, "verdict": "unknown", "report_markdown": "", "endpoints": []}


def argument_spec() -> dict:
    return {
        "target_release": {"type": "str"},
        "target_endpoint": {"type": "str"},
        "target_crds": {"type": "list", "elements": "raw", "default": []},
        "profiles_file": {"type": "path"},
        "profiles": {"type": "dict"},
        "fail_on": {"type": "list", "elements": "str", "choices": VERDICTS, "default": DEFAULT_FAIL_ON},
        "resources": {"type": "list", "elements": "str", "default": []},
        "record_max_age": {"type": "int"},
    }


def _endpoint_summary(ep) -> dict:
    return {"endpoint": ep.endpoint, "reachable": ep.reachable, "error": ep.error, "status": ep.status,
            "release": ep.release, "git_version": ep.git_version, "ready": ep.ready, "failed_groups": list(ep.failed_groups)}


def _live_target(module: KubeUpgradeModule, profiles, resources):
    """Observe the already-upgraded apiserver; it must answer, or there is no target to judge against."""
    client = module.client().for_endpoint(module.params["target_endpoint"], option="target_endpoint")
    observation = observe([client], profiles, resources=resources, include=(), cluster_client=module.client())
    live = observation.endpoints[0]
    if not live.reachable:
        raise ConfigurationError(f"target_endpoint: {live.error}. The live target must answer to be used; fix it, or "
                                 "judge against target_release instead.", details={"status": live.status})
    if live.failed_groups:
        module.warn(f"target_endpoint: {live.error}")
    return live


def run(module: KubeUpgradeModule) -> dict:
    params = module.params
    if not (params["target_release"] or params["target_endpoint"] or params["target_crds"]):
        raise ConfigurationError("Nothing to check against: give target_release (for example \"1.34\"), target_endpoint, "
                                 "and/or target_crds.")
    if params["record_max_age"] is not None and params["record_max_age"] < 0:
        raise ConfigurationError(f"record_max_age must be 0 or more seconds, got {params['record_max_age']}.")
    profiles = load_profiles(profiles_file=params["profiles_file"], profiles=params["profiles"])
    release = profiles.get(params["target_release"]) if params["target_release"] else None
    manifests = load_target_crds(params["target_crds"]) if params["target_crds"] else None
    resources = params["resources"] or None
    live = _live_target(module, profiles, resources) if params["target_endpoint"] else None
    observation = observe(module.endpoint_clients(), profiles, resources=resources,
                          include=("crds", "storage_states", "storage_versions"), cluster_client=module.client())
    for ep in observation.endpoints:
        if not ep.complete:
            module.warn(f"{ep.error} - the resources it serves are judged unknown")
    for warning in observation.warnings:
        module.warn(warning)
    target = verdicts.Target(release=release, live=live, storage_versions=None, crd_manifests=manifests)
    judgement = verdicts.judge(observation, target, profiles, resources=resources, record_max_age=params["record_max_age"])
    ordered = sorted(judgement.resources, key=lambda r: (-verdicts.VERDICT_ORDER.index(r.verdict), r.resource))
    result = {
        "changed": False,
        "resources": [r.to_dict() for r in ordered],
        "counts": dict(judgement.counts),
        "verdict": judgement.worst,
        "report_markdown": verdicts.render_markdown(judgement),
        "endpoints": [_endpoint_summary(ep) for ep in observation.endpoints],
        "msg": verdicts.render_text(judgement),
    }
    failing = sorted(({r.verdict for r in judgement.resources} | {judgement.worst}) & set(params["fail_on"]), key=verdicts.VERDICT_ORDER.index)
    bad_endpoints = [ep for ep in observation.endpoints if not ep.reachable]
    if bad_endpoints:
        result["msg"] = "\n".join(f"- {ep.error}" for ep in bad_endpoints) + "\n" + result["msg"]
    if failing:
        counts = ", ".join(f"{judgement.counts[v]} {v}" for v in failing)
        result["msg"] = f"pre-flight failed ({counts}; fail_on: {', '.join(params['fail_on'])})\n" + result["msg"]
        module.fail(result["msg"], result, error={"type": "VerdictFailure", "fail_on": failing})
    return result


def main() -> None:
    KubeUpgradeModule(argument_spec(), empty_result=EMPTY_RESULT, supports_check_mode=True).run(run)


if __name__ == "__main__":
    main()

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
  - An unreachable or unauthorised apiserver is one blocking finding of its own (agreement cannot be established
    without it); a group/version whose discovery fails makes only that group's resources C(unknown); a group/version
    served by an aggregated APIService is reported as not stored in this etcd and is not judged.
  - C(removed), C(unsafe) and C(needs_migration) are about objects that exist (see O(count_objects)); a resource with
    nothing stored is C(safe).
  - A StorageState record of a resource that neither the running apiservers nor the target serve is skipped with
    its reason (remove it with M(kubeupgrade.storage.storage_state) O(kubeupgrade.storage.storage_state#module:state=absent)).
  - Writes nothing to the cluster, unless O(refresh_records=true) brings the StorageState records up to date first.
  - Judges offline, with no apiserver, from an etcd audit (O(audit)) - with O(offline=true), or on its own when no
    apiserver answers and an audit is given. Release data stands in for built-ins, the CustomResourceDefinitions the
    audit read for custom resources, and O(running_releases) for what the running apiservers write and read. The
    result says so (RV(offline), RV(notes), the reports) with what that leaves out. Accepting an unreachable apiserver
    means judging without it, never passing - objects the audit finds the target cannot decode still block.
author: kubeupgrade.storage maintainers (@kubeupgrade)
extends_documentation_fragment:
  - kubeupgrade.storage.connection
  - kubeupgrade.storage.connection.endpoints
  - kubeupgrade.storage.attributes.action_group
options:
  target_release:
    description:
      - The Kubernetes release the apiservers will run, such as C("1.34") or C(v1.34.2). Quote it in YAML.
      - Must have a release profile (shipped, or added with O(profiles_file) or O(profiles)).
    type: str
  target_emulated_release:
    description:
      - The release the binary of O(target_release) will emulate (C(--emulated-version), compatibility versions,
        KEP-4330), such as C("1.35") for step 1 of a two-step upgrade to 1.36.
      - The target's storage versions are then predicted as the binary computes them at that release (the first
        non-alpha version introduced by the minimum compatibility release, else the first introduced by the emulated
        release; the storage pins of the binary's release bypass it), and only the versions the emulated release
        introduced count as served. What the binary can decode stays the binary's.
      - With O(upgrading), a host is done only at the binary of O(target_release) B(and) this emulated release.
      - Default (unset) is the binary at its own release.
    type: str
  target_min_compatibility_release:
    description:
      - The target's C(--min-compatibility-version) (Kubernetes 1.35+). Default is what the binary chooses, the
        emulated release minus one (the binary's release minus one for a 1.32 binary).
    type: str
  upgrade_strategy:
    description:
      - V(one_step) judges the target binary at its own release.
      - V(two_step) (compatibility versions, KEP-4330) decides from the apiservers which step of the two-step upgrade to
        O(target_release) comes next (RV(two_step)) and judges it - step 1, the target binary emulating the release the
        apiservers run now (as O(target_emulated_release) would); step 2, the target at its own release, once every
        apiserver runs its binary. A plane in the middle of a one-step roll is refused. O(target_emulated_release), when
        given, wins.
    type: str
    choices: [one_step, two_step]
    default: one_step
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
      - Verdicts that block (make the task fail). The result is returned in full either way.
      - The default blocks on every verdict that is not established C(safe), C(unknown) included - the check fails
        closed. Let a named resource through with O(accept) instead of narrowing this list.
      - Findings that are not about one resource (an apiserver that could not be read, a group/version whose discovery
        failed) have the verdict C(unknown).
      - In check mode they block as in a real run, unless O(check_mode_after_changes=true).
    type: list
    elements: str
    choices: [needs_migration, unsafe, unknown, removed, safe]
    default: [needs_migration, unsafe, unknown, removed]
  accept:
    description:
      - Verdicts the operator accepts, by subject, each with the reason the report shows. A subject is a resource
        (C(resourceclaims.resource.k8s.io)), a group/version whose discovery failed (C(metrics.k8s.io/v1beta1)) or
        an apiserver URL.
      - An accepted verdict is still reported (with C(accepted) set to the reason) but does not block.
      - A subject the check did not judge is a warning, not an error - one run's accepts go to every gate in it, and
        an accept that matches nothing lets nothing through.
    type: dict
    default: {}
  rehearsal:
    description:
      - The registered result of M(kubeupgrade.storage.storage_rehearsal) - the target kube-apiserver binary itself read a
        copy of etcd. Its measured failures beat release data - objects it could not decode or whose resource it does not
        serve make that resource C(unsafe) or C(removed) (named) where release data said C(safe) or C(unknown); a verdict
        that already asks for action keeps its next step and gains the names. A target that did not start on the copy
        blocks as a finding of its own.
      - A rehearsal that read everything does not clear a prediction about the versions the running apiservers still
        write; the reason says so.
      - Its release must be O(target_release); without O(target_release), the rehearsal's release is judged.
      - A rehearsal that did not run (C(rehearsed=false), O(kubeupgrade.storage.storage_rehearsal#module:if_unavailable)=C(skip))
        measures nothing; the report's notes say so and why, and release data judges alone.
    type: raw
  audit:
    description:
      - The registered result of M(kubeupgrade.storage.storage_version_audit) (an etcd scan). Measured beats
        remembered - for every resource the audit read, the persisted versions are exactly those found in etcd
        (no StorageState record and no C(Unknown) needed), whether objects exist is the audit's count, and a
        verdict that is not C(safe) names the objects stored in a version this check's target cannot read.
      - Those names are computed for this check's own target from the names the audit keeps per stored version, so
        one audit serves any target (an upgrade and its rollback); they are never names judged for the audit's own
        O(kubeupgrade.storage.storage_version_audit#module:target_release). An audit from before 0.3.0 (no names per
        version) names objects only for the target it judged; otherwise the reason says the names are not known.
      - Run the audit just before the check (the apiservers may write new objects in the meantime; the versions
        they write now are always added). Resources the audit did not read (a O(resources) filter on the audit)
        are judged from their records as without an audit.
      - Without any apiserver answering, the check judges from the audit alone (see O(offline)).
    type: raw
  offline:
    description:
      - Judge from O(audit) alone and contact no apiserver (the connection options and O(endpoints) are not used, and
        no kubeconfig is needed) - for a snapshot's audit judged on the controller, or a maintenance window.
      - Built-ins are judged against release data, custom resources against the CustomResourceDefinitions the audit
        read in etcd (and O(target_crds)); what is stored and whether objects exist are the audit's. The resources
        judged are those the audit found.
      - Left out, and said in RV(notes) and the reports - whether the apiservers agree, the versions they serve, their
        StorageState records, objects written after the audit, and, without O(running_releases), what the running
        apiservers write and read (so whether a migration through them helps).
      - With V(false) (the default) the check still judges this way when no apiserver answers and O(audit) is given;
        each unreachable apiserver stays a blocking finding of its own unless accepted.
      - Cannot be combined with O(target_endpoint), O(upgrading) or O(refresh_records), which need a live apiserver.
    type: bool
    default: false
  running_releases:
    description:
      - The Kubernetes releases the apiservers that wrote the audited etcd run (such as V(["1.28", "1.32"]) during a
        roll; quote them). Used only when the check judges offline, where release data then says what those
        apiservers write and read - the same as a live check would see unless flags or feature gates change it.
    type: list
    elements: str
  count_objects:
    description:
      - Count the stored objects of every resource whose verdict is not C(safe) (one metadata-only LIST with
        C(limit=1) each, through an apiserver that serves it). With nothing stored the verdict becomes C(safe)
        (nothing can be undecodable); a LIST that fails with C(no kind is registered) makes it C(unsafe).
      - Set to V(false) to judge types only (no extra requests); verdicts are then about what may be stored.
    type: bool
    default: true
  resources:
    description:
      - Resources to check, by kubectl-style name. Default is every persisted resource.
    type: list
    elements: str
    default: []
  refresh_records:
    description:
      - Before judging, bring the StorageState records up to date with what this check observes, exactly as
        M(kubeupgrade.storage.storage_state) does with its defaults - install the StorageState CRD when it is missing,
        create missing records (C(Unknown) plus the hashes observed now), append newly observed hashes, renew old
        heartbeats - then judge from the refreshed records. One task instead of two; the result is in
        RV(records_refreshed).
      - In check mode nothing is written (RV(records_refreshed) says what would be) and the records are judged as they are.
      - With V(false) (the default) the check writes nothing and judges the records as they are.
      - With O(audit), the records are set from the audit's measurement instead, exactly as
        M(kubeupgrade.storage.storage_state) with O(kubeupgrade.storage.storage_state#module:audit) sets them (a
        resource whose every object etcd holds in the current storage version gets a C(current) record), and the
        check judges from the audit, whose measurement beats the records for what it read.
    type: bool
    default: false
  target_running_release:
    description:
      - When O(target_release) is empty (and no O(rehearsal) names a release), judge against the release the apiservers
        run now - the first one an apiserver reports, in the order of O(endpoints). For a check after a migration without
        a target (every apiserver runs one release once they agreed). No apiserver reporting its release is an error.
      - Ignored when O(target_release) is given. Cannot be combined with O(offline=true).
    type: bool
    default: false
  check_mode_after_changes:
    description:
      - Say that this check gates the result of earlier steps of the same play that check mode skips (a migration, a
        record refresh). Then, in check mode only, a resource verdict C(needs_migration) or C(unknown) - what those
        steps would settle - is returned in RV(would_block) and named in the notes instead of blocking; apiservers
        that could not be read, C(unsafe) and C(removed) still block.
      - With V(false) (the default), check mode blocks as a real run does (a dry run of a gate fails when the gate
        would fail). This task's own O(refresh_records) settles nothing a real run would not block on - a new record
        says C(Unknown) - so it changes nothing here; a heartbeat the refresh would renew can make check mode
        stricter than the real run, never more lenient.
      - The collection's roles set it on the gates that follow a migration.
    type: bool
    default: false
  record_max_age:
    description:
      - Seconds after which a StorageState record whose heartbeat was not refreshed is not trusted (its resource
        is then C(unknown)). Default is to trust records of any age.
    type: int
  report_dir:
    description:
      - Directory on the controller where the JSON and Markdown reports are written (created when missing), also
        when the module runs on another host through C(delegate_to).
      - They are written once the check has judged, also when its verdicts block, and never in check mode.
        A relative path is relative to the working directory of C(ansible-playbook).
      - Default is to write no report files (the Markdown report is in RV(report_markdown)).
    type: path
  report_name:
    description:
      - File name of the reports in O(report_dir), without extension.
    type: str
    default: storage-check
  upgrade_order:
    description:
      - The apiserver endpoints of a rolling upgrade, in the order their hosts are upgraded. Used with O(upgrading).
    type: list
    elements: str
    default: []
  judged_before:
    description:
      - The resources the previous gate of the same rolling upgrade judged (the names in its RV(resources)) - every
        resource an apiserver served, a StorageState record or a CRD named then, all apiservers observed.
      - A resource not among them was served by no apiserver then (new in the release the roll brings, such as
        C(servicecidrs.networking.k8s.io) in 1.32), so every object of it was written since, by the apiservers that
        serve it now, in the versions they report - its record's C(Unknown), created since, is not a doubt.
      - Default (unset) is no previous gate - every resource is judged from its record or the audit.
    type: list
    elements: str
  timeline:
    description:
      - The steps of the run so far, each made from a registered result by the
        P(kubeupgrade.storage.timeline_step#filter) filter (a check, an agreement, a migration, an observation).
      - With it, this check adds itself as the last step and returns RV(timeline) and RV(timeline_lines), and its
        Markdown report ends with the timeline - per step, each apiserver's binary and emulated release, whether the
        storage hashes agreed, the gate, and what was migrated (what C(upgrade.yml)'s final report shows).
    type: list
    elements: dict
  upgrading:
    description:
      - The endpoint of the apiserver whose host a rolling upgrade is about to touch (one of O(upgrade_order)). The
        check then establishes from the apiservers themselves where the roll stands (RV(roll)) - every apiserver
        before it in O(upgrade_order) must run O(target_release) and be ready, and this one may already be done -
        so that no host is skipped and none is upgraded twice, whatever the play's batch semantics did.
    type: str
attributes:
  check_mode:
    description:
      - Judges as usual; with O(refresh_records=true) reports which records would change and writes nothing.
      - Blocks as a real run does; with O(check_mode_after_changes=true) the C(needs_migration) and C(unknown)
        resource verdicts an earlier, skipped migration would settle are reported in RV(would_block) instead.
    support: full
  diff_mode:
    description: No diff is returned; RV(records_refreshed) lists each record's change.
    support: none
notes:
  - At least one of O(target_release), O(target_endpoint), O(target_crds), O(rehearsal) or O(target_running_release) is required.
  - Offline, the check needs the C(kubernetes) Python package only because every cluster module of the collection
    loads with it.
  - The reports are written by this module's action plugin, on the controller.
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

- name: Let two known verdicts through, with the reasons the report shows
  kubeupgrade.storage.storage_version_check:
    target_release: "1.34"
    accept:
      secrets: "re-created from Vault after the upgrade (CHG-1234)"
      metrics.k8s.io/v1beta1: "metrics-server is down; it stores nothing in etcd"

- name: Against an apiserver that already runs the new binary
  kubeupgrade.storage.storage_version_check:
    target_endpoint: https://10.0.0.11:6443
    endpoints: [https://10.0.0.12:6443, https://10.0.0.13:6443]
    fail_on: [unsafe, removed, unknown]

- name: Judge a snapshot's etcd audit on the controller, with no apiserver
  kubeupgrade.storage.storage_version_check:
    offline: true
    audit: "{{ snapshot_audit }}"
    target_release: "1.33"
    running_releases: ["1.32"]
  delegate_to: localhost

- name: Judge from a control-plane node, keep the reports on the controller
  kubeupgrade.storage.storage_version_check:
    target_release: "1.34"
    report_dir: "{{ playbook_dir }}/reports"
    report_name: preflight-1.34
  delegate_to: cp1
"""

RETURN = r"""
headline:
  description:
    - One line with the cause first - what blocks (the first five subjects by name, with their verdicts) and what to do -
      or that nothing blocks. Roles print the table, then fail with this line.
  returned: success
  type: str
  sample: "pre-flight blocks on resourceclaims.resource.k8s.io (unsafe) and 1 more: take each next step in the report, or accept by name."
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
    measured:
      description: When the persisted versions were measured in etcd (from O(audit)); null when they come from records.
      type: str
      sample: "2026-11-24T04:00:00Z"
    objects_named:
      description:
        - Objects the audit found stored in a version this check's target cannot read (a target without the resource
          reads none), computed for this target from the audit's names per stored version; at most the audit's
          C(names_limit), and the reason says when the list is cut or cannot be made.
      type: list
      elements: str
      sample: ["demo/gpu-claim"]
    served_behind_flags:
      description:
        - True when the verdict is C(unknown) only because the target release serves the resource in alpha or beta
          versions alone (served only when the apiserver's runtime-config and feature gates enable them) and no running
          apiserver serves one of them now. Every stored object is then named (with O(audit)). A O(rehearsal) whose
          target served the resource and read every object settles it as C(safe).
      type: bool
      sample: false
    objects:
      description: What the count of stored objects said - C(none), C(present), C(undecodable), C(not counted);
        null when no count was needed.
      type: str
      sample: present
    accepted:
      description: The operator's reason from O(accept), or null.
      type: str
      sample: null
    blocking:
      description: Whether this verdict blocks.
      type: bool
      sample: false
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
  description: The report in Markdown, worst first (findings, resources, not stored, skipped).
  returned: always
  type: str
  sample: "**Storage pre-flight: safe, gate passes (safe: 61, ...)** ..."
report_text:
  description: A compact fixed-width table of what is not safe, for the play output.
  returned: always
  type: str
  sample: "Storage pre-flight: safe, gate passes (...)"
blocking:
  description: Every verdict and finding that blocks (in O(fail_on) and not accepted). Empty when the gate passes.
  returned: always
  type: list
  elements: dict
  sample: [{"subject": "resourceclaims.resource.k8s.io", "scope": "resource", "verdict": "unsafe",
            "reason": "...", "next_step": "..."}]
accepted:
  description: The verdicts that O(accept) let through, with the operator's reason.
  returned: always
  type: list
  elements: dict
  sample: [{"subject": "secrets", "verdict": "unknown", "reason": "re-created by the vault operator"}]
findings:
  description: What blocks besides a resource - an apiserver that could not be read, a group/version whose
    discovery failed (not an aggregated API). Each has C(subject), C(scope) (C(apiserver) or C(group_version)),
    C(verdict), C(reason), C(next_step), C(accepted), C(blocking).
  returned: always
  type: list
  elements: dict
  sample: [{"subject": "https://10.0.0.13:6443", "scope": "apiserver", "verdict": "unknown", "blocking": true}]
not_stored:
  description: Group/versions served by aggregated APIServices - their objects are not in this etcd, so they are
    not judged, migrated or blocking.
  returned: always
  type: list
  elements: dict
  sample: [{"group_version": "metrics.k8s.io/v1beta1", "api_service": "v1beta1.metrics.k8s.io",
            "service": "kube-system/metrics-server", "reason": "..."}]
skipped_resources:
  description: StorageState records of resources that neither the running apiservers nor the target serve.
  returned: always
  type: list
  elements: dict
  sample: [{"resource": "podsecuritypolicies.policy", "reason": "...", "next_step": "..."}]
report_files:
  description: The JSON and Markdown reports written in O(report_dir) (empty in check mode).
  returned: when O(report_dir) is set and the check judged
  type: list
  elements: path
  sample: ["/home/ops/kubeupgrade-reports/preflight-1.34.json", "/home/ops/kubeupgrade-reports/preflight-1.34.md"]
disagreeing:
  description:
    - Resources whose storage version is not the same on every apiserver, or that not every apiserver serves
      (expected in the middle of an upgrade), with the version each apiserver reports.
  returned: always
  type: list
  elements: dict
  sample: [{"resource": "leasecandidates.coordination.k8s.io",
            "storage_versions": {"https://10.0.0.11:6443": "v1beta1", "https://10.0.0.12:6443": "v1alpha2"}}]
agreed:
  description:
    - Whether every apiserver answered with complete discovery and all report the same storage version for every
      resource (readiness aside), as M(kubeupgrade.storage.storage_version_info) reports it. V(false) offline (not read).
  returned: when the check judged
  type: bool
  sample: true
records_refreshed:
  description:
    - With O(refresh_records=true), what was done to the records - as M(kubeupgrade.storage.storage_state) returns it
      (C(records), C(crd_installed), C(unreachable_endpoints), C(msg), C(changed)). C(changed) of the check is
      C(changed) of this.
  returned: when O(refresh_records=true) and an apiserver answered
  type: dict
  sample: {"changed": true, "records": [{"name": "secrets", "action": "created"}], "crd_installed": false,
           "unreachable_endpoints": [], "msg": "create 1, update 0 StorageState record(s); 60 unchanged"}
endpoints:
  description:
    - Per endpoint - reachable, error (with the HTTP status), release, ready. Offline, the apiservers that did not
      answer (none with O(offline=true)); release data standing in for apiservers is not listed here.
  returned: always
  type: list
  elements: dict
  sample: [{"endpoint": "https://10.0.0.11:6443", "reachable": true, "error": null, "status": null, "release": "1.33", "ready": true}]
releases:
  description:
    - The releases the reachable apiservers run, sorted. One release - a migration may wait for their agreement;
      several - a rolling upgrade is under way (mixed releases), and migrating waits until it is finished.
  returned: success
  type: list
  elements: str
  sample: ["1.32"]
unreachable_endpoints:
  description:
    - The apiservers that did not answer (each is also a blocking finding unless accepted). A pre-flight is meaningful
      only when this is empty; the preflight role stops on it.
  returned: always
  type: list
  elements: str
  sample: ["https://10.0.0.13:6443"]
unreachable_msg:
  description:
    - Why the apiservers in RV(unreachable_endpoints) could not be observed, cause and first fix on the first line (the
      fix for each after it, per reason - rejected or missing credentials, no grant, TLS, no answer); empty when every
      apiserver answered. The preflight role fails with it.
  returned: success
  type: str
  sample: "cannot observe https://10.0.0.13:6443: make it reachable, or remove it from the endpoints, then run again"
migration:
  description:
    - What a play may migrate before its rolling upgrade touches a host, decided from RV(verdict), RV(releases), whether
      O(audit) and O(target_crds) are given. Nothing when RV(verdict) is C(safe), nor while the apiservers run
      different releases (a roll is under way - the checks before each host and the final gate take over). Otherwise,
      with O(audit), the objects it found in a version the target cannot decode; without one, or with O(target_crds),
      the resources the records and a check against the target select.
    - C(resources) - migrate what the records and a check against the target select (the migrate role);
      C(objects_from_audit) - migrate the objects the audit named (M(kubeupgrade.storage.storage_migration)
      O(kubeupgrade.storage.storage_migration#module:objects_from_audit)); with both, the migrate role runs first; C(why) - why
      nothing is migrated while something is not safe, empty otherwise.
  returned: when the check judged
  type: dict
  sample: {"resources": false, "objects_from_audit": false,
           "why": "Not migrating before the rolling upgrade: the apiservers run different releases (1.32, 1.33), ..."}
offline:
  description: Whether the check judged offline, from O(audit) with no apiserver read (see O(offline)).
  returned: success
  type: bool
  sample: false
notes:
  description:
    - What the judgement rests on and leaves out when it is offline (which audit, that no apiserver was read, whether
      release data stood in for the running apiservers, CRDs the audit could not read); empty online. The reports
      show them under the headline.
  returned: success
  type: list
  elements: str
  sample: ["Judged offline (offline: true) from the etcd audit of etcd https://127.0.0.1:2379, revision 812 ..."]
running_releases:
  description: The releases release data stood in for when judging offline (O(running_releases)), as profiles name them.
  returned: when the check judged offline
  type: list
  elements: str
  sample: ["1.32"]
target_emulation:
  description:
    - How the target binary runs when O(target_emulated_release) or O(target_min_compatibility_release) is given - its
      release, the release it emulates and the minimum compatibility release its storage versions keep.
  returned: when O(target_emulated_release) or O(target_min_compatibility_release) is given
  type: dict
  sample: {"release": "1.36", "emulated_release": "1.35", "min_compatibility_release": "1.34"}
way_back_release:
  description:
    - The release a binary rollback from the target returns to, as the apiservers run now - the oldest release one of
      them serves as (its emulated release, else its binary's) older than the target; null when every apiserver
      already serves as the target. C(upgrade.yml) judges the way back to it after the roll (report
      C(rollback-<release>)).
  returned: when a target release is judged against live apiservers
  type: str
  sample: "1.35"
two_step:
  description:
    - With O(upgrade_strategy=two_step), the step this run makes - C(step) (1, 2, or 0 when every apiserver already runs
      the target at its own release), C(emulated_release) (the release the target binary runs at in step 1, else null),
      C(current_release) and C(msg).
  returned: when O(upgrade_strategy=two_step)
  type: dict
  sample: {"step": 1, "emulated_release": "1.35", "current_release": "1.35", "msg": "step 1 of 2: ..."}
would_block:
  description:
    - In check mode with O(check_mode_after_changes=true), the resource verdicts (C(needs_migration), C(unknown)) in
      O(fail_on) and not accepted that are reported, not blocking, because check mode skipped the earlier migration
      that would settle them; same shape as RV(blocking). The notes and reports say so.
  returned: in check mode with O(check_mode_after_changes=true)
  type: list
  elements: dict
  sample: [{"subject": "secrets", "scope": "resource", "verdict": "needs_migration", "reason": "...", "next_step": "..."}]
timeline:
  description:
    - O(timeline) with this check as its last step; each step has C(step), C(at) and C(apiservers) (C(endpoint),
      C(version), C(emulated_release), C(up)), and as its result says C(agreed) and C(disagreeing), C(gate) (C(passed)
      or C(blocked)), C(verdict) and C(blocking), C(migrated) (C(resource), C(objects), C(status)), C(failed), or
      C(skipped).
  returned: when O(timeline) is given
  type: list
  elements: dict
  sample: [{"step": "gate before cp1", "at": "2026-12-02T10:00:00Z", "gate": "passed", "verdict": "safe", "blocking": [],
            "agreed": true, "disagreeing": [], "apiservers": [{"endpoint": "https://10.0.0.11:6443", "version": "v1.35.3",
                                                               "emulated_release": null, "up": true}]}]
timeline_lines:
  description: RV(timeline), one line per step, for the play's output.
  returned: when O(timeline) is given
  type: list
  elements: str
  sample: ["1. pre-flight (2026-12-02T10:00:00Z): 10.0.0.11:6443 v1.35.3; 10.0.0.12:6443 v1.35.3; storage hashes agreed; gate passed (safe)"]
roll:
  description:
    - Where the rolling upgrade stands before the host of O(upgrading) is touched, from the apiservers themselves.
    - C(release) and C(emulated_release) - what the apiserver of O(upgrading) runs now (a rollback returns to it).
    - C(done) - it already runs O(target_release) (at O(target_emulated_release) when given) and is ready (not upgraded
      again); C(pending_before) - the endpoints earlier in O(upgrade_order) that are not on the target and ready;
      C(unready) - every apiserver observed that is unreachable or not ready.
    - C(stop) - the roll must stop before this host - an apiserver in C(unready), or one in C(pending_before) (not in
      check mode, which upgrades no host, so the hosts before this one cannot be on the target there); C(msg) says why,
      else whether this host is done or next.
  returned: when O(upgrading) is given
  type: dict
  sample: {"endpoint": "https://10.0.0.12:6443", "release": "1.32", "emulated_release": null, "ready": true, "done": false,
           "pending_before": [],
           "unready": [], "stop": false,
           "msg": "https://10.0.0.12:6443 (release 1.32, ready) is next: every host before it runs 1.33."}
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule

# No "blocking" on a failure before any judgement: the roles tell that failure from blocking verdicts by it.
# Every key RETURN documents as always returned, as a failure before any judgement has them (nothing judged).
EMPTY_RESULT = {"resources": [], "counts": {}, "verdict": "unknown", "report_markdown": "", "report_text": "", "blocking": [],
                "accepted": [], "findings": [], "not_stored": [], "skipped_resources": [], "endpoints": [], "disagreeing": [],
                "unreachable_endpoints": []}


def argument_spec() -> dict:
    return {
        "target_release": {"type": "str"},
        "target_emulated_release": {"type": "str"},
        "target_min_compatibility_release": {"type": "str"},
        "upgrade_strategy": {"type": "str", "choices": ["one_step", "two_step"], "default": "one_step"},
        "target_endpoint": {"type": "str"},
        "target_crds": {"type": "list", "elements": "raw", "default": []},
        "profiles_file": {"type": "path"},
        "profiles": {"type": "dict"},
        "fail_on": {"type": "list", "elements": "str", "choices": runner.VERDICT_CHOICES, "default": runner.DEFAULT_FAIL_ON},
        "accept": {"type": "dict", "default": {}},
        "count_objects": {"type": "bool", "default": True},
        "audit": {"type": "raw"},
        "offline": {"type": "bool", "default": False},
        "running_releases": {"type": "list", "elements": "str"},
        "rehearsal": {"type": "raw"},
        "resources": {"type": "list", "elements": "str", "default": []},
        "record_max_age": {"type": "int"},
        "refresh_records": {"type": "bool", "default": False},
        "check_mode_after_changes": {"type": "bool", "default": False},
        "target_running_release": {"type": "bool", "default": False},
        # Used by the action plugin, which writes the reports on the controller.
        "report_dir": {"type": "path"},
        "report_name": {"type": "str", "default": "storage-check"},
        "upgrade_order": {"type": "list", "elements": "str", "default": []},
        "upgrading": {"type": "str"},
        "judged_before": {"type": "list", "elements": "str"},
        "timeline": {"type": "list", "elements": "dict"},
    }


class CheckModule(KubeUpgradeModule):
    """With O(offline=true) no apiserver is contacted, so no connection is resolved either: a controller judging a
    snapshot's audit needs no kubeconfig (the connection options under C(module_defaults) are left unused)."""

    def endpoint_clients(self) -> list:
        return [] if self.params.get("offline") else super().endpoint_clients()


def run(module: KubeUpgradeModule) -> dict:
    result = runner.run(module)
    if result["blocking"]:
        module.fail(result["msg"], result, error={"type": "VerdictFailure", "blocking": len(result["blocking"])})
    return result


def main() -> None:
    CheckModule(argument_spec(), empty_result=EMPTY_RESULT, supports_check_mode=True).run(run)


if __name__ == "__main__":
    main()

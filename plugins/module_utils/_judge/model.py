# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-flight's vocabulary: verdicts, the target, one resource's verdict, and the whole judgement.

Plain data only, so that the engine, the reports, the modules and the tests share one definition.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Dict, List, Optional

# The verdicts, re-exported: the judge's files and tests name them from here.
from ansible_collections.kubeupgrade.storage.plugins.module_utils.verdicts import (  # noqa: F401 pylint: disable=unused-import
    BLOCKING_BY_DEFAULT,
    NEEDS_MIGRATION,
    REMOVED,
    SAFE,
    UNKNOWN,
    UNSAFE,
    VERDICT_ORDER,
    worst_of,
)

# What check mode after a play's skipped changes reports without blocking: what a skipped migration would settle.
# Apiservers not read, unsafe and removed block as in a real run.
CHECK_MODE_REPORTED = (NEEDS_MIGRATION, UNKNOWN)

# What a count of stored objects said (ResourceVerdict.objects).
OBJECTS_NONE = "none"
OBJECTS_PRESENT = "present"
OBJECTS_UNDECODABLE = "undecodable"
OBJECTS_UNCOUNTED = "not counted"


@dataclass
class Target:
    """What the binaries after the swap can read; give any combination (most precise source wins per resource)."""

    release: Optional[object] = None  # profiles.ReleaseProfile
    live: Optional[object] = None  # observation.EndpointObservation of an already-upgraded apiserver
    storage_versions: Optional[Dict[str, object]] = None  # name ("apps.deployments") -> ObservedStorageVersion
    crd_manifests: Optional[Dict[str, object]] = None  # CRD name -> ObservedCrd


@dataclass
class JudgeOptions:
    """How to judge: which resources, how old a record may be, object counts, what the operator accepts."""

    resources: Optional[List[str]] = None  # kubectl-style names; None = every persisted resource
    record_max_age: Optional[int] = None  # seconds; an older heartbeat counts as Unknown
    now: Optional[datetime] = None
    counts: Optional[Dict[str, object]] = None  # name -> observation.ObjectCount
    accept: Optional[Dict[str, str]] = None  # subject (resource, group/version, apiserver) -> reason
    fail_on: tuple = BLOCKING_BY_DEFAULT
    audit: Optional[dict] = None  # a storage_version_audit result: measured persisted versions and counts
    # Resources the previous gate of a rolling upgrade judged (every one served, recorded or a CRD then); None =
    # no previous gate. One not among them was written only by the apiservers that serve it now.
    judged_before: Optional[List[str]] = None
    rehearsal: Optional[dict] = None  # a storage_rehearsal result: what the target binary itself read on a copy of etcd
    # Judged with no live apiserver: the observation is the audit's CRDs plus release data (``offline.py``), and the
    # resources judged are those the audit found. ``notes``: what the judgement rests on and leaves out (reported).
    offline: bool = False
    notes: Optional[List[str]] = None
    # Check mode after earlier changes of the play, which it skipped: these verdicts are reported and do not block,
    # since the skipped migration and record writes would settle them (``CHECK_MODE_REPORTED``); () otherwise.
    held_in_check_mode: tuple = ()


@dataclass
class ResourceVerdict:
    resource: str
    verdict: str
    reason: str
    next_step: str
    persisted_hashes: List[str] = field(default_factory=list)
    persisted_versions: List[str] = field(default_factory=list)  # the hashes and storedVersions that map to a version
    current_versions: Dict[str, Optional[str]] = field(default_factory=dict)  # endpoint -> version (None = unknown)
    target_storage_version: Optional[str] = None
    target_decodable_versions: List[str] = field(default_factory=list)
    conservative: bool = False
    running_can_read_target: Optional[bool] = None  # None = cannot tell
    unresolved_hashes: List[str] = field(default_factory=list)  # persisted hashes that map to no version (incl. Unknown)
    target_source: str = ""
    objects: Optional[str] = None  # none / present / undecodable / not counted; None when no count was asked
    accepted: Optional[str] = None  # the operator's reason for accepting this verdict
    blocking: bool = False  # whether this verdict stops an upgrade gate
    measured: Optional[str] = None  # when the persisted versions were measured in etcd (None: from records)
    objects_named: List[str] = field(default_factory=list)  # objects stored in a version this target cannot read (audit)
    # unknown only because the target release serves the resource in alpha or beta versions alone, which no running
    # apiserver serves now: a rehearsal that serves it and reads every object settles it (safe)
    served_behind_flags: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Finding:
    """Something that is not one resource and still blocks: an apiserver or a group/version that could not be read."""

    subject: str  # an apiserver URL or a group/version
    scope: str  # "apiserver" | "group_version" | "rehearsal" | "judgement" (nothing judged: never accepted)
    verdict: str
    reason: str
    next_step: str
    accepted: Optional[str] = None
    blocking: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Judgement:
    resources: List[ResourceVerdict] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=dict)
    worst: str = SAFE
    findings: List[Finding] = field(default_factory=list)
    not_stored: List[dict] = field(default_factory=list)  # aggregated group/versions: their objects are elsewhere
    skipped: List[dict] = field(default_factory=list)  # records of resources nothing serves any more
    notes: List[str] = field(default_factory=list)  # what the judgement rests on and leaves out (offline)
    offline: bool = False  # judged with no live apiserver (from an etcd audit and release data)
    held: List[dict] = field(default_factory=list)  # verdicts that would block, held in check mode (shape of blocking)

    @property
    def blocking(self) -> List[dict]:
        """Every verdict and finding that stops a gate, in one shape: subject, verdict, reason, next step."""
        items = [{"subject": f.subject, "scope": f.scope, "verdict": f.verdict, "reason": f.reason,
                  "next_step": f.next_step} for f in self.findings if f.blocking]
        items += [{"subject": r.resource, "scope": "resource", "verdict": r.verdict, "reason": r.reason,
                   "next_step": r.next_step} for r in self.resources if r.blocking]
        return items

    @property
    def accepted(self) -> List[dict]:
        items = [{"subject": f.subject, "verdict": f.verdict, "reason": f.accepted} for f in self.findings if f.accepted]
        return items + [{"subject": r.resource, "verdict": r.verdict, "reason": r.accepted}
                        for r in self.resources if r.accepted]

    def to_dict(self) -> dict:
        return {"resources": [r.to_dict() for r in self.resources], "counts": dict(self.counts), "worst": self.worst,
                "findings": [f.to_dict() for f in self.findings], "not_stored": list(self.not_stored),
                "skipped": list(self.skipped), "blocking": self.blocking, "accepted": self.accepted,
                "notes": list(self.notes), "offline": self.offline}

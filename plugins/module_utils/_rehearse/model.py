# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a rehearsal measured, as plain data: the flags it used, each resource's reads, the verdicts and reports.

A rehearsal is the strongest evidence there is: the target binary itself, with the cluster's
storage flags, read the stored data. Its verdicts are measured, not predicted:

- ``safe``: the target served the resource and read every stored object;
- ``unsafe``: the target could not decode these objects (named): after the swap, reads of them fail
  with 500 ``no kind ... is registered``;
- ``removed``: objects are stored for a resource the target does not serve at all (named);
- ``unknown``: reading failed for another reason (named), so nothing is established.

A target that exits or never becomes ready on the copy blocks everything: the swap would leave an
apiserver that never starts.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import KubeUpgradeError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.verdicts import REMOVED, SAFE, UNKNOWN, UNSAFE, VERDICT_ORDER, worst_of


class RehearsalError(KubeUpgradeError):
    """The rehearsal could not be run: names the option or the tool at fault and what to do."""


# The kube-apiserver flags that decide how stored data is read (copied from the cluster's apiserver); the compatibility
# version flags (KEP-4330) decide which APIs a binary serves and which versions it stores in.
STORAGE_FLAGS = ("encryption-provider-config", "runtime-config", "feature-gates", "etcd-prefix", "storage-media-type",
                 "service-cluster-ip-range", "emulated-version", "min-compatibility-version", "emulation-forward-compatible")
# Where the cluster's apiserver reads etcd (the default source of the copy).
ETCD_FLAGS = ("etcd-servers", "etcd-cafile", "etcd-certfile", "etcd-keyfile")
MANIFEST = "/etc/kubernetes/manifests/kube-apiserver.yaml"  # kubeadm's and kubespray's static pod

_KLOG_PROBLEM = re.compile(r"^[EF]\d{4} ")
# klog's structured lines escape the quotes inside err="..." (no kind \"X\" is registered ...): both forms are read.
_NO_KIND = re.compile(r'no kind \\?"([^"\\]+)\\?" is registered for version \\?"([^"\\]+)\\?"')
_GATE = re.compile(r"unrecognized feature gate: ([A-Za-z0-9]+)")
_FLAG = re.compile(r"unknown flag: (--[a-z0-9-]+)")


def parse_args(argv: Iterable[str]) -> Dict[str, str]:
    """``--name=value`` and ``--name value`` pairs of a command line (the static pod form is the first)."""
    found: Dict[str, str] = {}
    items = [str(a) for a in argv]
    index = 0
    while index < len(items):
        item = items[index]
        index += 1
        if not item.startswith("--"):
            continue
        name, sep, value = item[2:].partition("=")
        if not sep and index < len(items) and not items[index].startswith("--"):
            value = items[index]
            index += 1
        found[name] = value
    return found


def flags_from_manifest(doc) -> Dict[str, str]:
    """The kube-apiserver container's flags of a static pod manifest; ValueError saying what is wrong."""
    if not isinstance(doc, dict) or doc.get("kind") != "Pod":
        raise ValueError("it is not a Pod manifest")
    containers = ((doc.get("spec") or {}).get("containers")) or []
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, dict):
            continue
        command = list(container.get("command") or []) + list(container.get("args") or [])
        if container.get("name") == "kube-apiserver" or (command and str(command[0]).endswith("kube-apiserver")):
            return parse_args(command)
    raise ValueError("it has no container named kube-apiserver")


@dataclass
class ResourceRead:
    """One resource as the rehearsal read it; names are bounded by ``names_limit``, counts are exact."""

    resource: str
    keys: int = 0  # stored in the copy before the target started
    served: bool = False
    served_as: Optional[str] = None  # group/version read through
    objects_read: int = 0
    undecodable: int = 0
    undecodable_names: List[str] = field(default_factory=list)
    removed_names: List[str] = field(default_factory=list)
    error: Optional[str] = None  # a read failure that is not a decode failure
    decode_errors: List[str] = field(default_factory=list)  # distinct apiserver messages, e.g. no kind "X" is registered ...
    manifest: Optional[str] = None  # a target CRD manifest applied to the copy: "applied" or "rejected: <why>"


def verdict_of(read: ResourceRead) -> dict:
    """The measured verdict of one resource, with its reason and next step."""
    shown = ", ".join(read.undecodable_names or read.removed_names)
    if read.manifest and read.manifest.startswith("rejected"):
        return {"verdict": UNSAFE, "reason": f"the target CRD manifest of {read.resource} was refused on the copy "
                                             f"({read.manifest[len('rejected: '):]}); applied to the cluster it would be too",
                "next_step": f"rewrite the objects of {read.resource} in a version the manifest keeps and prune the CRD's "
                             f"status.storedVersions (kubeupgrade.storage.storage_migration with resources: [{read.resource}] "
                             "and the manifest as target_crds), then rehearse again"}
    if not read.served:
        return {"verdict": REMOVED, "reason": f"the target does not serve {read.resource}, and {read.keys} object(s) of it are "
                                              f"stored{': ' + shown if shown else ''}",
                "next_step": f"delete or export the objects of {read.resource} through the running apiservers before the swap "
                             "(the target cannot serve them); for a rollback past a release that introduced it, restore the "
                             "etcd snapshot taken before the upgrade"}
    if read.undecodable:
        why = f" ({'; '.join(read.decode_errors[:3])})" if read.decode_errors else ""
        return {"verdict": UNSAFE, "reason": f"the target could not decode {read.undecodable} of {read.keys} stored object(s) of "
                                             f"{read.resource}{why}: {shown}",
                "next_step": f"rewrite them in a version the target reads while the running apiservers still read them "
                             f"(kubeupgrade.storage.storage_migration with resources: [{read.resource}]), then rehearse again; "
                             "where no running apiserver reads them either, export them, delete them through etcd and "
                             "re-create them; for a rollback, restore the etcd snapshot taken before the upgrade"}
    if read.error:
        return {"verdict": UNKNOWN, "reason": f"reading {read.resource} through the target failed: {read.error}",
                "next_step": "look at the error; rehearse again once it is fixed"}
    return {"verdict": SAFE, "reason": f"the target read all {read.objects_read} object(s) of {read.resource}"
                                       + (f" ({read.keys} stored)" if read.keys != read.objects_read else ""),
            "next_step": "none"}


def problem_lines(log_text: str, limit: int = 12) -> List[str]:
    """The apiserver's error and fatal lines (klog E/F, or a bare ``Error:``), each message once: the first ones
    (the cause is usually early) and the last ones (what made it exit), ``limit`` in all."""
    seen, lines = set(), []
    for line in log_text.splitlines():
        line = line.rstrip()
        if not (_KLOG_PROBLEM.match(line) or line.startswith("Error:")):
            continue
        message = line.split("] ", 1)[-1]
        if message in seen:
            continue
        seen.add(message)
        lines.append(line if len(line) <= 400 else line[:397] + "...")
    if len(lines) <= limit:
        return lines
    return lines[:limit // 2] + lines[-(limit - limit // 2):]


def ignored_gates(log_text: str) -> List[str]:
    """Feature gates the target warned it does not know (some builds ignore them instead of exiting): a gate the
    operator set that the target silently drops."""
    return sorted(set(_GATE.findall(log_text)))


def decode_errors_in(lines: Iterable[str]) -> List[str]:
    """Distinct ``Kind (group/version)`` the apiserver said it cannot decode."""
    found = []
    for line in lines:
        for kind, version in _NO_KIND.findall(line):
            entry = f"{kind} ({version})"
            if entry not in found:
                found.append(entry)
    return found


def start_failure(lines: List[str], exit_code: Optional[int], waited: float, flags_option: Dict[str, str],
                  log_text: Optional[str] = None) -> dict:
    """Why the target did not come up on the copy, and what to do: a blocking verdict of its own. The kinds it cannot
    decode come from its whole log (``log_text``) when given: ``lines`` keeps a dozen error lines, and an apiserver
    that cannot decode six kinds logs each in lines of its own."""
    text = "\n".join(lines)
    gate, flag = _GATE.search(text), _FLAG.search(text)
    kinds = decode_errors_in(log_text.splitlines() if log_text is not None else lines)
    how = f"exited with code {exit_code}" if exit_code is not None else f"did not become ready within {waited:.0f} s"
    if gate:
        step = (f"the target release does not know the feature gate {gate.group(1)}: remove it from the apiserver's "
                f"--feature-gates before the swap (here: option {flags_option.get('feature-gates', 'feature_gates')}), "
                "then rehearse again")
    elif flag:
        step = (f"the target binary does not accept {flag.group(1)}: drop or rename it in the apiserver's flags "
                "before the swap, then rehearse again")
    elif kinds:
        step = (f"the target cannot decode stored {', '.join(kinds)} and fails at start: rewrite those objects in a version "
                "the target reads while the running apiservers still read them (kubeupgrade.storage.storage_migration); for a "
                "rollback past what the newer release wrote, restore the etcd snapshot taken before the upgrade")
    else:
        step = "read the apiserver's log lines in fatal_log; fix the cause and rehearse again"
    return {"subject": "target apiserver start", "scope": "rehearsal", "verdict": UNSAFE,
            "reason": f"the target kube-apiserver {how} on the copy of etcd: after the swap it would never serve"
                      + (f" (cannot decode {', '.join(kinds)})" if kinds else ""),
            "next_step": step}


def summarize(reads: List[ResourceRead], start_problem: Optional[dict], fail_on) -> dict:
    """Verdicts, counts and the blocking list (every verdict in ``fail_on``, and a start failure always)."""
    resources, counts = {}, {verdict: 0 for verdict in VERDICT_ORDER}
    blocking = [start_problem] if start_problem else []
    for read in sorted(reads, key=lambda r: r.resource):
        entry = dict(asdict(read), **verdict_of(read))
        del entry["resource"]
        resources[read.resource] = entry
        counts[entry["verdict"]] += 1
        if entry["verdict"] in fail_on and entry["verdict"] != SAFE:
            blocking.append({"subject": read.resource, "scope": "resource", "verdict": entry["verdict"],
                             "reason": entry["reason"], "next_step": entry["next_step"]})
    verdict = worst_of([e["verdict"] for e in resources.values()] + ([UNSAFE] if start_problem else []))
    return {"resources": resources, "counts": counts, "verdict": verdict, "blocking": blocking}


def headline(result: dict) -> str:
    """The outcome on one line; what the target cannot read is said whether or not ``fail_on`` makes it block."""
    target = result.get("target_git_version") or "the target"
    if result.get("start_failure"):
        return f"rehearsal blocks: {target} does not start on the copy of etcd ({result['start_failure']['reason']})"
    read = sum(e["objects_read"] for e in result["resources"].values())
    bad = [(name, e["verdict"]) for name, e in result["resources"].items() if e["verdict"] != SAFE]
    if bad:
        shown = ", ".join(f"{name} ({verdict})" for name, verdict in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        verb = "blocks on" if result["blocking"] else "finds (fail_on lets them through here)"
        return f"rehearsal {verb} {len(bad)} resource(s) not safe: {shown}; {target} read {read} object(s) in all"
    return f"rehearsal passes: {target} read {read} object(s) of {len(result['resources'])} resource(s), nothing blocks"


def render_text(result: dict) -> str:
    """A compact table for the play output: every resource that is not safe, then what was read."""
    lines = [headline(result)]
    if result.get("start_failure"):
        lines += ["  " + line for line in result.get("fatal_log", [])[-6:]]
        lines.append("next step: " + result["start_failure"]["next_step"])
    rows = [(name, e["verdict"], str(e["keys"]), str(e["objects_read"]), e["next_step"])
            for name, e in result["resources"].items() if e["verdict"] != SAFE]
    if rows:
        rows.insert(0, ("RESOURCE", "VERDICT", "STORED", "READ", "NEXT STEP"))
        width = [min(max(len(r[i]) for r in rows), 48) for i in range(4)]
        lines += ["  ".join(cell[:48].ljust(width[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in rows]
        lines += [f"  {name}: {e['reason']}" for name, e in result["resources"].items() if e["verdict"] != SAFE]
    planned = result.get("plan_migration")
    if planned:
        lines.append(f"plan: {planned['git_version']} migrated {planned['objects_migrated']} object(s) of the copy in "
                     f"{planned['seconds']:.1f} s ({planned['failed']} failed) before the target read it")
    timing = result.get("timings") or {}
    lines.append(f"{result['counts'].get(SAFE, 0)} resource(s) safe; copy {timing.get('copy_seconds', 0):.1f} s, start "
                 f"{timing.get('start_seconds', 0):.1f} s, read {timing.get('read_seconds', 0):.1f} s")
    copy = result.get("copy_dir")
    if copy:
        lines.append(f"the copy was in {copy['path']} while it ran: {'removed' if copy['removed'] else 'NOT removed, remove it'}")
    return "\n".join(lines)


def render_markdown(result: dict) -> str:
    """The same as a Markdown report for a ticket: the target, the flags, the source and every resource."""
    source = result.get("source") or {}
    lines = [f"# Rehearsal on {result.get('target_git_version') or 'the target'}", "", f"**{headline(result)}**", "",
             f"- binary: `{result.get('binary')}`", f"- copy: {source.get('kind')} {source.get('from', '')}, revision "
             f"{source.get('revision')}, {source.get('keys')} key(s)",
             "- flags: " + (", ".join(f"`--{k}={v}`" for k, v in sorted((result.get("flags") or {}).items())) or "none"), ""]
    failure = result.get("start_failure")
    if failure:
        lines += ["## Start failure", "", failure["reason"], "", "```", *result.get("fatal_log", []), "```", "",
                  "Next step: " + failure["next_step"], ""]
    lines += ["| resource | verdict | stored | read | undecodable | reason | next step |", "| --- | --- | --- | --- | --- | --- | --- |"]
    order = sorted(result["resources"].items(), key=lambda kv: (-VERDICT_ORDER.index(kv[1]["verdict"]), kv[0]))
    for name, e in order:
        cells = (name, e["verdict"], e["keys"], e["objects_read"], e["undecodable"], e["reason"], e["next_step"])
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"

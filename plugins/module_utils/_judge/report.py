# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-flight report, rendered once here for every consumer (module ``msg``, Markdown file, play output)."""

from __future__ import annotations

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import SAFE, VERDICT_ORDER
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN as UNKNOWN_HASH


def _cell(value) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        distinct = sorted({v or "?" for v in value.values()})
        return ", ".join(distinct) if distinct else "-"
    if isinstance(value, (list, tuple, set)):
        return ", ".join(value) if value else "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _worst_first(items):
    return sorted(items, key=lambda r: (-VERDICT_ORDER.index(r.verdict), r.resource))


def _status(item) -> str:
    if item.accepted:
        return f"accepted: {item.accepted}"
    return "BLOCKS" if item.blocking else "passes"


def _headline(judgement) -> str:
    blocking = judgement.blocking
    gate = f"blocks ({len(blocking)})" if blocking else "passes"
    offline = "; offline: judged from the etcd audit, no apiserver read" if judgement.offline else ""
    return (f"Storage pre-flight: {judgement.worst}, gate {gate} ("
            + ", ".join(f"{v}: {judgement.counts.get(v, 0)}" for v in VERDICT_ORDER) + offline + ")")


def _persisted(item) -> list:
    return list(item.persisted_versions) + [h if h == UNKNOWN_HASH else f"{h} (unmapped)" for h in item.unresolved_hashes]


def render_markdown(judgement, title: str = "") -> str:
    """A report an operator can read in a ticket or a PR comment: the decision, then what is not safe (worst first,
    with the reason and the next step), then what the judgement rests on (its notes), then the safe resources in one
    compact table."""
    lines = [f"# {title}", ""] if title else []
    lines += [f"**{_headline(judgement)}**", ""]
    if judgement.findings:
        lines += ["| apiserver or group/version | verdict | gate | reason | next step |", "| --- | --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(_cell(v) for v in (f.subject, f.verdict, _status(f), f.reason, f.next_step)) + " |"
                  for f in judgement.findings]
        lines.append("")
    attention = [item for item in _worst_first(judgement.resources) if item.verdict != SAFE or item.accepted]
    safe = [item for item in _worst_first(judgement.resources) if item not in attention]
    if attention:
        lines += [
            "| resource | verdict | gate | objects | persisted | current | target storage | target reads | reason | next step |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for item in attention:
            verdict = item.verdict + (" (conservative)" if item.conservative else "")
            lines.append("| " + " | ".join(_cell(v) for v in (
                item.resource, verdict, _status(item), item.objects or "-", _persisted(item), item.current_versions,
                item.target_storage_version, item.target_decodable_versions, item.reason, item.next_step)) + " |")
    elif judgement.resources:
        lines.append("Every resource is safe: every version persisted is one the target reads.")
    if judgement.notes:  # what the judgement rests on: after what blocks, which leads
        lines += [""] + [f"> {note}" for note in judgement.notes]
    if safe:
        lines += ["", f"**Safe ({len(safe)})**: nothing to do for these.", "",
                  "| resource | objects | persisted | current | target storage |", "| --- | --- | --- | --- | --- |"]
        for item in safe:
            cells = (item.resource, item.objects or "-", _persisted(item), item.current_versions, item.target_storage_version)
            lines.append("| " + " | ".join(_cell(v) for v in cells) + " |")
    for title_, rows, key in (("Not stored in this etcd (aggregated APIs, not judged)", judgement.not_stored, "group_version"),
                              ("Skipped (StorageState records of resources nothing serves)", judgement.skipped, "resource")):
        if rows:
            lines += ["", f"**{title_}**", ""] + [f"- {row[key]}: {row['reason']}" for row in rows]
    return "\n".join(lines) + "\n"


def render_text(judgement) -> str:
    """A short summary for a module's ``msg`` and the play output: one line per thing that is not safe."""
    lines = [_headline(judgement)] + [f"Note: {note}" for note in judgement.notes]
    for finding in judgement.findings:
        lines.append(f"- {finding.subject}: {finding.verdict} ({_status(finding)}): {finding.reason} Next: {finding.next_step}")
    for item in _worst_first(judgement.resources):
        if item.verdict != SAFE:
            lines.append(f"- {item.resource}: {item.verdict} ({_status(item)}): {item.reason} Next: {item.next_step}")
    for row in judgement.not_stored:
        lines.append(f"- {row['group_version']}: not stored here: {row['reason']}")
    for row in judgement.skipped:
        lines.append(f"- {row['resource']}: skipped: {row['reason']} Next: {row['next_step']}")
    return "\n".join(lines)


def render_table(judgement) -> str:
    """A compact fixed-width table for the play output: one row per resource that is not safe, then a count."""
    rows = [("SUBJECT", "VERDICT", "GATE", "OBJECTS", "NEXT STEP")]
    for finding in judgement.findings:
        rows.append((finding.subject, finding.verdict, _status(finding), "-", finding.next_step))
    for item in _worst_first(judgement.resources):
        if item.verdict != SAFE:
            rows.append((item.resource, item.verdict, _status(item), item.objects or "-", item.next_step))
    safe = judgement.counts.get(SAFE, 0)
    width = [min(max(len(r[i]) for r in rows), 48) for i in range(4)]
    lines = [_headline(judgement)] + [f"Note: {note}" for note in judgement.notes]
    lines += ["  ".join(str(cell)[:48].ljust(width[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in rows]
    lines.append(f"{safe} resource(s) safe" + (f"; {len(judgement.not_stored)} aggregated group/version(s) not stored here"
                                               if judgement.not_stored else "")
                 + (f"; {len(judgement.skipped)} stale record(s) skipped" if judgement.skipped else ""))
    return "\n".join(lines)


# The keys of a check result that make up the JSON report file, in this order.
DOCUMENT_KEYS = ("verdict", "counts", "blocking", "accepted", "findings", "resources", "not_stored", "skipped_resources",
                 "offline", "notes", "timeline")


def document(result: dict, target_release) -> dict:
    """The JSON report file of a check result: what was judged against, by which apiservers, and the verdicts."""
    doc = {"target_release": target_release or "",
           "endpoints": [ep.get("endpoint") for ep in result.get("endpoints", [])]}
    doc.update({key: result.get(key) for key in DOCUMENT_KEYS})
    return doc

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd audit: what every object under the apiserver's etcd prefix is really stored as.

Files: ``model.py`` (pure: per-resource results folded in one pass), ``result.py`` (pure: a registered result, checked),
``runner.py`` (what the ``storage_version_audit`` module calls; it scans through the etcd layer's client,
``_etcd/client.py``, and decodes each value with the etcd layer's ``keys.py`` and ``envelope.py``).

Helpers for other capabilities (they take the module's result, ``audit``, as plain data):

- ``result.parse(audit, option) -> AuditResult``: the one check that a value is a registered result, before any
  request, for every module option that takes one (``audit``, ``objects_from_audit``): a ``ConfigurationError``
  naming the option, the field and the next step otherwise.
- ``model.records_from_audit(audit, current_hashes) -> {resource: [persisted hashes]}``: StorageState
  records measured in etcd; ``current_hashes`` is ``{resource: current storage hash}``. Persisted is
  exactly the hashes found, ``[current]`` when nothing or only the current version is stored, and it
  includes ``Unknown`` when some value could not be read.
- ``model.objects_from_audit(audit) -> {resource: ["ns/name" | "name", ...]}``: the objects stored in a
  version the audit's target cannot decode (the audit's ``readable_versions``/``target_release``);
  complete only for an audit run with ``names_limit: -1``, see ``model.truncated_from_audit(audit)``.
- ``model.names_not_readable(audit["resources"][name], readable) -> (names, count)``: the objects stored
  in a version outside ``readable``, for any target, from the names kept per stored version (None for an
  audit before 0.3.0, which kept none).
- ``model.crds_from_audit(audit) -> {name: definition}``: the CustomResourceDefinitions read in etcd.
- Per resource, ``audit["resources"][name]`` has ``objects``, ``versions`` (apiVersion, kind, count,
  hash, names), ``hashes``, ``unreadable``/``unreadable_names``, and when judged ``not_readable`` and
  ``not_readable_names`` (for the audit's own ``target_release``). The top level has ``crds``,
  ``crds_unread``, ``target_release`` and ``names_limit``.

Layer: a capability over the etcd layer (its one scan) and ``_observe`` (CRD parsing); the snapshot, the records, the
judge, the migration and the rehearsal may import it, it imports none of them. The order is
tests/unit/test_package_layers.py.
"""

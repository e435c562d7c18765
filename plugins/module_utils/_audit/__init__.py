# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd audit: what every object under the apiserver's etcd prefix is really stored as.

Files: ``model.py`` (pure: per-resource results folded in one pass), ``result.py`` (pure: a registered result, checked),
``runner.py`` (what the ``storage_version_audit`` module calls; it scans through the etcd layer's client,
``_etcd/client.py``, and decodes each value with the etcd layer's ``keys.py`` and ``envelope.py``).

What other capabilities read of the module's result (as data, never by importing this package) is in the shared
file ``audit_result.py``: ``parse``, ``records_from_audit``, ``objects_from_audit``, ``names_not_readable``,
``crds_from_audit``, ``truncated_from_audit``. Per resource, ``audit["resources"][name]`` has ``objects``, ``versions``
(apiVersion, kind, count, bytes, hash, names), ``hashes``, ``unreadable``/``unreadable_names``, and when judged
``not_readable`` and ``not_readable_names`` (for the audit's own ``target_release``). The top level has ``crds``,
``crds_unread``, ``target_release``, ``names_limit`` and ``etcd_space``.

Layer: a capability over the etcd layer (its one scan), ``audit_result`` and ``_observe`` (CRD parsing); no other
capability imports it, and it imports none of them. The order is
tests/unit/test_package_layers.py.
"""

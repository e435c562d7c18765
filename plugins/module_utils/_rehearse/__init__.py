# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rehearse: start the target kube-apiserver binary on a private copy of etcd and read every object through it.

``model.py`` is pure (flags, verdicts, reports); ``apiserver.py`` starts the target apiserver on the copy, which
lives in a scratch etcd of the etcd layer (``_etcd/scratch.py``); ``reader.py`` reads through the rehearsed apiserver;
``runner.py`` is what ``storage_rehearsal`` calls.

Layer: a capability over the etcd layer (the copy and its scratch etcd, the key layout), ``_rewrite`` (the plan
migrated on the copy with the client migrator ``storage_migration`` runs), ``verdicts`` (the words), ``_observe`` and
the API layer; it imports no other capability, and no package imports it. The order
is tests/unit/test_package_layers.py.
"""

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""judge: can a target (release, live apiserver, StorageVersion objects, CRD manifests) read what is stored?

``model`` (vocabulary), ``evidence`` and ``views`` (what is persisted, what each side reads),
``steps`` (one resource's verdict), ``findings`` (apiservers and group/versions), ``engine``
(``judge``), ``report`` (rendering) are pure; ``runner`` does the I/O a module needs.

Layer: a capability over ``_observe`` and ``_remember`` (the records it judges), the API layer and the shared files
(an audit read with ``audit_result``, the verdicts' words in ``verdicts``); no package imports it: the migration gets
its verdicts as data (``engine.resource_verdicts``, given by the ``storage_migration`` module). The order is tests/unit/test_package_layers.py.
"""

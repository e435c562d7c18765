# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rewriting objects through an apiserver: the client-side migrator (each object read and written back unchanged,
so the apiserver stores it in its current storage version), its checkpoints and rate limit, and a CRD's
``status.storedVersions`` once its objects are rewritten.

Layer: a primitive over the API layer and ``_observe``'s CRD reading; no capability. The migration and the
rehearsal's copy both run it, side by side. The order is tests/unit/test_package_layers.py.
"""

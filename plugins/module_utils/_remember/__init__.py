# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""remember: StorageState records (``migration.k8s.io/v1alpha1``), the memory of what may be persisted.

``records`` plans every record change (pure); ``storage_state_io`` reads and writes them, installs
the StorageState CRD, and removes records nothing serves any more; ``runner`` is what ``storage_state`` calls.

Layer: a capability over ``_observe``, the API layer and ``audit_result`` (records measured by an audit). The order is
tests/unit/test_package_layers.py.
"""

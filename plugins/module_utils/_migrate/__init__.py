# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Storage migration: plan (pure), client-side migrator, cluster-side driver, checkpoints, locks, runner.

Layer: a capability over ``_judge`` (the migration before a roll), ``_observe``, ``_remember`` and the API layer (an
audit read with ``audit_result``); only the rehearsal imports it. The order is tests/unit/test_package_layers.py.
"""

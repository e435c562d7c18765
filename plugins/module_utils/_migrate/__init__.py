# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Storage migration: plan (pure), cluster-side driver, locks, bookkeeping, progress, runner; the objects are rewritten by
``_rewrite`` (the client-side migrator, its checkpoints and rate limit).

Layer: a capability over ``_rewrite``, ``_observe``, ``_remember`` (the records it writes) and the API layer (an audit
read with ``audit_result``); no package imports it. ``select: from_check`` takes the check's verdicts from the judge
its module gives ``runner.run``: it imports no check. The order is tests/unit/test_package_layers.py.
"""

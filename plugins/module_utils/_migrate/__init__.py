# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Storage migration: plan (pure), client-side migrator, cluster-side driver, checkpoints, locks, runner."""

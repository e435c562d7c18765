# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one API layer: connection settings, the HTTP client, API paths and waiting, below every capability."""

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd layer, at the bottom beside the API layer: settings from the module options, the etcd client, and the
scratch etcd members with the tools of each release. It imports no capability; every capability that reads etcd goes
through it, never through another.
"""

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd layer, at the bottom beside the API layer: its settings from the module options (``settings.py``) and the etcd client
(``client.py``, ``windows.py`` and the generated ``etcdpb/``). It imports no capability; every capability that reads etcd goes through it, never through another.
"""

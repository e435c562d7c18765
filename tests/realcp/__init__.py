# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real Kubernetes control plane (etcd + real kube-apiservers) on loopback for tests; see ``realcp.plane``."""

from realcp.plane import (
    ApiError,
    ControlPlane,
    PlaneError,
    binary,
    reap_leftovers,
    require_assets,
    restart_apiserver,
    start_apiserver,
    stop_apiserver,
)

__all__ = ["ApiError", "ControlPlane", "PlaneError", "binary", "reap_leftovers", "require_assets", "restart_apiserver",
           "start_apiserver", "stop_apiserver"]

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Simulator fixtures: start a simulated HA control plane (tests/simulator/apisim) under tmp_path."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "simulator"))

from apisim.harness import ControlPlane


def _start_order(item) -> int:
    """Scenario tests (marked slow) run several playbooks: minutes; other playbook tests 5-60 s; the rest seconds."""
    if item.get_closest_marker("slow"):
        return 0
    return 1 if "ansible_playbook" in getattr(item, "fixturenames", ()) else 2


def pytest_collection_modifyitems(config, items):
    """Start the longest tests first, so that parallel workers (pytest -n) do not end on them one by one."""
    items.sort(key=_start_order)


@pytest.fixture
def control_plane_factory(tmp_path):
    """A function starting a ControlPlane with the given options; every plane it started is stopped at teardown."""
    if os.environ.get("KUBEUPGRADE_TEST_KUBECONFIG"):
        pytest.skip("needs a simulated control plane and its admin interface; with KUBEUPGRADE_TEST_KUBECONFIG "
                    "only the tests that do not run")
    started = []

    def start(**options):
        plane = ControlPlane(tmp_path / f"control-plane-{len(started)}", **options)
        started.append(plane)
        return plane.start()

    yield start
    for plane in started:
        plane.stop()


@pytest.fixture
def control_plane(control_plane_factory):
    """Three apiservers on release 1.32, serving HTTPS."""
    return control_plane_factory(apiservers=3, releases="1.32", tls=True)


# Real control planes (tests/realcp): etcd plus real kube-apiserver binaries from KUBEUPGRADE_TEST_K8S_ASSETS.
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from realcp.fixtures import real_plane_factory  # noqa: E402

__all__ = ["real_plane_factory"]  # a fixture: used by the tests that name it

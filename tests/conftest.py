# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Simulator fixtures: start a simulated HA control plane (tests/simulator/apisim) under tmp_path."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "simulator"))

from apisim.harness import ControlPlane


def _start_order(item) -> tuple:
    """Scenario tests (marked slow) run several playbooks: minutes, the longest (``slow(minutes=N)``, as measured on
    2 loaded cores) first; other playbook tests 5-60 s; the rest seconds."""
    slow = item.get_closest_marker("slow")
    if slow:
        return 0, -slow.kwargs.get("minutes", 0)
    return (1 if "ansible_playbook" in getattr(item, "fixturenames", ()) else 2), 0


def pytest_collection_modifyitems(config, items):
    """Start the longest tests first (with pytest -n, dealt out to the workers in turn: see below)."""
    items.sort(key=_start_order)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest -n --dist worksteal, with the tests dealt out to the workers in turn instead of in one block each: the
    sorted order above then starts the longest scenario tests at once on different workers (in one block they all
    queued on the first worker, the two longest of 15 minutes or more one after the other), and idle workers still
    take the ends of the others' queues."""
    if config.getoption("dist", None) != "worksteal":
        return None
    from xdist.scheduler import WorkStealingScheduling

    class DealtWorkStealing(WorkStealingScheduling):
        def schedule(self):
            if self.collection is not None or not self._check_nodes_have_same_collection():
                return super().schedule()
            self.collection = next(iter(self.node2collection.values()))
            nodes = self.nodes
            for offset, node in enumerate(nodes):
                dealt = list(range(offset, len(self.collection), len(nodes)))
                if dealt:
                    self.node2pending[node].extend(dealt)
                    node.send_runtest_some(dealt)
            self.pending[:] = []
            return None

    return DealtWorkStealing(config, log)


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

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scratch etcd on real etcd binaries (Debian's 3.4 and 3.5): waited for and written over gRPC (Maintenance/Status,
KV/Txn; no JSON gateway), the copy read back byte for byte, and a member that refuses or dies said as such."""

from __future__ import annotations

import random

import etcd_fixture
import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions


@pytest.fixture(params=[None, "3.5"], ids=["3.4", "3.5"])
def member(request, tmp_path):
    workspace = scratch.Workspace(str(tmp_path))
    etcd = scratch.ScratchEtcd(workspace, etcd_fixture.require_etcd(request.param))
    try:
        etcd.start()
        yield etcd
    finally:
        workspace.close()


def _pairs():
    """More keys than one transaction holds, binary keys and values, empty values, and values that fill TXN_BYTES."""
    rng = random.Random(7)
    pairs = [(b"/registry/configmaps/ns/cm-%05d" % i, rng.randbytes(rng.randrange(0, 300))) for i in range(2500)]
    pairs += [(b"/registry/secrets/ns/" + rng.randbytes(12), b"\x00\xff" * 50) for _i in range(50)]
    pairs += [(b"/registry/big/b-%d" % i, rng.randbytes(1 << 20)) for i in range(12)]
    return sorted(dict(pairs).items())


def test_the_copy_is_written_and_read_back_byte_for_byte(member):
    pairs, progressed = _pairs(), []
    keys, size = member.put_all(iter(pairs), progressed.append)
    assert (keys, size) == (len(pairs), sum(len(k) + len(v) for k, v in pairs))
    assert progressed == sorted(progressed) and len(progressed) >= 3, progressed  # one per full transaction
    reader = EtcdReader(EtcdSettings(endpoints=[member.url]))
    assert list(reader.scan(ScanOptions(prefix="/registry/", page_size=1000))) == pairs
    assert reader.transport == "grpc" and reader._gateway is None
    assert member._status(2.0)["header"]["revision"] > 1


def test_a_write_the_scratch_etcd_refuses_is_said(member):
    """A value larger than the member takes in one request (its --max-request-bytes): etcd's words, no traceback."""
    with pytest.raises(scratch.ScratchError) as raised:
        member.put_all([(b"/registry/huge", b"x" * (scratch.TXN_BYTES + (4 << 20)))])
    assert str(raised.value).startswith(f"the scratch etcd ({member.binary}) refused a write of the copy (gRPC "), str(raised.value)


def test_a_scratch_etcd_that_dies_during_the_copy_is_said(member):
    def pairs():
        yield b"/registry/a", b"1"
        for index in range(scratch.TXN_OPS):
            yield b"/registry/b-%05d" % index, b"2"
        member.process.kill()
        member.process.wait()
        yield b"/registry/c", b"3"

    with pytest.raises(scratch.ScratchError) as raised:
        member.put_all(pairs())
    assert str(raised.value).startswith(f"the scratch etcd ({member.binary}) exited while the copy was written (exit -9, gRPC "), \
        str(raised.value)


LAUNCH_SCRIPT = r"""
import os, sys, time
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
forks = []
os.register_at_fork(before=lambda: forks.append(1))  # runs on fork(), and on a subprocess with a preexec_fn
workspace = scratch.Workspace(sys.argv[1])
child = workspace.start(["sleep", "300"], "sleep.log")
deadline = time.monotonic() + 20
while not open(f"/proc/{child.pid}/cmdline", "rb").read().startswith(b"sleep\0"):
    assert time.monotonic() < deadline, "the launcher never became the program"
    time.sleep(0.05)
print(child.pid, len(forks), flush=True)
os._exit(0)  # the module killed: no close(), no teardown
"""


def test_a_child_is_started_without_fork_handlers_becomes_the_program_and_dies_with_the_module(tmp_path):
    """A fork that runs handlers hung a rehearsal for good once gRPC's threads ran in the module (grpc/grpc#34442):
    children are started with vfork (no handlers run, none of the module's code between fork and exec), and still die
    with the module (the launcher asks for PR_SET_PDEATHSIG, then execs the program)."""
    import os
    import subprocess
    import sys
    import time

    done = subprocess.run([sys.executable, "-c", LAUNCH_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    pid, forks = map(int, done.stdout.split())
    assert forks == 0, "a fork handler ran: the child was started by fork(), not vfork"
    deadline = time.monotonic() + 10
    while scratch.process_running(pid):
        assert time.monotonic() < deadline, f"the child {pid} outlived the module"
        time.sleep(0.1)


def test_a_program_that_cannot_run_is_one_line_in_its_log(tmp_path):
    """The launcher cannot exec it: its log says so in one line (what the rehearsal shows of a child that exited), and
    the child exits non-zero."""
    workspace = scratch.Workspace(str(tmp_path))
    try:
        child = workspace.start([str(tmp_path / "no-such-binary"), "--flag"], "missing.log")
        assert child.wait(timeout=30) != 0
        with open(workspace.file("missing.log"), encoding="utf-8") as handle:
            log = handle.read()
        assert log == f"cannot run {tmp_path / 'no-such-binary'}: No such file or directory\n"
    finally:
        workspace.close()

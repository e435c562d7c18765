"""Start and drive a simulated control plane from Python (tests, benchmarks, the demo).

The control plane runs as a separate process (``python -m apisim``) so that it is exercised exactly as the CLI
runs it and does not compete with the test process for the GIL.
"""

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

SIMULATOR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stop_process(process, timeout=10):
    """SIGTERM ``process`` (a Popen) when it still runs and SIGKILL it after ``timeout`` seconds; reaped either way.
    Also what tests/etcd_fixture.py stops etcd with."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class AdminError(RuntimeError):
    """The admin interface refused an operation."""


class AdminClient:
    """JSON over plain HTTP to the control plane's admin port; apiserver indexes are 0-based."""

    def __init__(self, url):
        self.url = url

    def _call(self, operation, **params):
        request = urllib.request.Request(f"{self.url}/{operation}", data=json.dumps(params).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.load(response)["result"]
        except urllib.error.HTTPError as error:
            raise AdminError(json.load(error).get("error", str(error))) from None

    def set_release(self, index, release):
        return self._call("set_release", index=index, release=release)

    def stop(self, index):
        return self._call("stop", index=index)

    def start(self, index):
        return self._call("start", index=index)

    def restart(self, index):
        return self._call("restart", index=index)

    def status(self):
        return self._call("status")

    def fault(self, kind, apiserver=None, **params):
        return self._call("fault", kind=kind, apiserver=apiserver, **params)

    def clear_faults(self):
        return self._call("clear_faults")

    def put_raw(self, resource, namespace, name, encoded_version, obj):
        return self._call("put_raw", resource=resource, namespace=namespace, name=name,
                          encoded_version=encoded_version, obj=obj)

    def add_apiservice(self, group, version, service="kube-system/metrics-server", available=False):
        return self._call("add_apiservice", group=group, version=version, service=service, available=available)

    def delete_raw(self, resource, namespace, name):
        return self._call("delete_raw", resource=resource, namespace=namespace, name=name)

    def stored_objects(self, resource):
        return self._call("stored_objects", resource=resource)

    def compact(self):
        return self._call("compact")

    def stats(self):
        return self._call("stats")

    def reset_stats(self):
        return self._call("reset_stats")

    def seed(self, name):
        return self._call("seed", name=name)


class ControlPlane:
    """A simulated HA control plane in a child process; also a context manager."""

    def __init__(self, workdir, apiservers=3, releases="1.32", tls=True, storage_version_api=False,
                 compaction_window=300.0, migrator_delay=0.2, seed=None, etcd=None):
        self.workdir = os.path.abspath(str(workdir))
        self.apiservers = apiservers
        self.releases = [releases] * apiservers if isinstance(releases, str) else list(releases)
        if len(self.releases) != apiservers:
            raise ValueError(f"{len(self.releases)} releases given for {apiservers} apiservers")
        self.tls = tls
        self.storage_version_api = storage_version_api
        self.compaction_window = compaction_window
        self.migrator_delay = migrator_delay
        self.seed = seed
        self.etcd = etcd  # {endpoint, prefix, ca_file, cert_file, key_file}: also keep the store in that etcd
        self.process = None
        self.state = None
        self.admin = None

    def command(self):
        cmd = [sys.executable, "-m", "apisim", "--apiservers", str(self.apiservers), "--state-dir", self.workdir,
               "--compaction-window", str(self.compaction_window), "--migrator-delay", str(self.migrator_delay)]
        for index, release in enumerate(self.releases):
            cmd += ["--release", f"{index}={release}"]
        if not self.tls:
            cmd.append("--plain")
        if self.storage_version_api:
            cmd.append("--storage-version-api")
        for name in [self.seed] if isinstance(self.seed, str) else (self.seed or []):
            cmd += ["--seed", name]
        for option, key in (("--etcd-endpoint", "endpoint"), ("--etcd-prefix", "prefix"), ("--etcd-cacert", "ca_file"),
                            ("--etcd-cert", "cert_file"), ("--etcd-key", "key_file")):
            if (self.etcd or {}).get(key):
                cmd += [option, self.etcd[key]]
        return cmd

    def start(self, timeout=60.0):
        os.makedirs(self.workdir, exist_ok=True)
        state_file = os.path.join(self.workdir, "control-plane.json")
        if os.path.exists(state_file):
            os.remove(state_file)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SIMULATOR_DIR,
                                                                        os.environ.get("PYTHONPATH")])))
        self._log = open(os.path.join(self.workdir, "apisim.log"), "wb")
        self.process = subprocess.Popen(self.command(), env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not os.path.exists(state_file):
            if self.process.poll() is not None:
                raise RuntimeError(f"apisim exited with {self.process.returncode}; see {self._log.name}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"apisim did not start within {timeout}s; see {self._log.name}")
            time.sleep(0.02)
        with open(state_file) as handle:
            self.state = json.load(handle)
        self.admin = AdminClient(self.state["admin"])
        for url in self.endpoints:
            self.wait_ready(url, deadline)
        return self

    def wait_ready(self, url, deadline):
        context = ssl.create_default_context(cafile=self.ca_file) if self.tls else None
        while True:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not become ready")
            time.sleep(0.02)

    def stop(self):
        stop_process(self.process)
        if getattr(self, "_log", None):
            self._log.close()
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def endpoints(self):
        return list(self.state["endpoints"])

    def module_args(self, **extra):
        """A collection module's arguments for this plane (its kubeconfig and every apiserver), plus ``extra``."""
        return {"kubeconfig": self.kubeconfig, "endpoints": self.endpoints, **extra}

    @property
    def front(self):
        return self.state["front"]

    @property
    def kubeconfig(self):
        return self.state["kubeconfig"]

    @property
    def endpoint_kubeconfigs(self):
        return list(self.state["endpoint_kubeconfigs"])

    @property
    def token(self):
        return self.state["token"]

    @property
    def ca_file(self):
        return self.state["ca_file"]

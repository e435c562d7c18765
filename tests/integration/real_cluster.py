# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster the integration tests run against: a real one, or a simulated one (no tests here).

With ``KUBEUPGRADE_TEST_KUBECONFIG`` the tests that need no simulator admin interface run against
that cluster. ``KUBEUPGRADE_TEST_ENDPOINTS`` (comma-separated apiserver URLs, one per apiserver)
says which apiservers to observe one by one; by default, the kubeconfig's server. Each test works in
its own namespace with its own CRD (a group no one else uses) and deletes them, and the StorageState
record it made, afterwards. Without the variable, the same tests run against a simulated control
plane started once per test module.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

KUBECONFIG_VARIABLE = "KUBEUPGRADE_TEST_KUBECONFIG"
ENDPOINTS_VARIABLE = "KUBEUPGRADE_TEST_ENDPOINTS"
NEEDS_ADMIN = (f"needs the simulated control plane's admin interface (it reads etcd's encoding or switches "
               f"apiserver releases); with {KUBECONFIG_VARIABLE} only the tests that do not run")
STORAGE_STATES = ("migration.k8s.io", "v1alpha1", "storagestates")


def real_kubeconfig() -> Optional[str]:
    return os.environ.get(KUBECONFIG_VARIABLE) or None


@dataclass
class Cluster:
    """Where the modules connect: a kubeconfig and every apiserver endpoint."""

    kubeconfig: str
    endpoints: list
    simulated: bool
    api: object = field(default=None, repr=False)

    def module_args(self, **extra) -> dict:
        return {"kubeconfig": self.kubeconfig, "endpoints": list(self.endpoints), **extra}


def connect(kubeconfig: str, endpoints=None, simulated=False) -> Cluster:
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    if not endpoints:
        env = os.environ.get(ENDPOINTS_VARIABLE, "")
        endpoints = [e.strip() for e in env.split(",") if e.strip()] or [api.configuration.host]
    return Cluster(kubeconfig, list(endpoints), simulated, api)


def crd_manifest(group: str, storage: str, versions=("v1alpha1", "v1")) -> dict:
    plural = "widgets"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {"kubeupgrade.storage/test": "true"}},
        "spec": {
            "group": group,
            "names": {"plural": plural, "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": v, "served": True, "storage": v == storage,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                                         "x-kubernetes-preserve-unknown-fields": True}}}
                         for v in versions],
        },
    }


class Sandbox:
    """A namespace and a CRD of its own on the cluster; ``cleanup()`` deletes them and the record."""

    def __init__(self, cluster: Cluster):
        from kubernetes import client

        self.cluster = cluster
        self.suffix = uuid.uuid4().hex[:8]
        self.namespace = f"kubeupgrade-test-{self.suffix}"
        self.group = f"t{self.suffix}.kubeupgrade-storage.test"
        self.resource = f"widgets.{self.group}"
        self.core = client.CoreV1Api(cluster.api)
        self.crds = client.ApiextensionsV1Api(cluster.api)
        self.objects = client.CustomObjectsApi(cluster.api)
        self.core.create_namespace({"metadata": {"name": self.namespace,
                                                 "labels": {"kubeupgrade.storage/test": "true"}}})

    def create_crd(self, storage: str, versions=("v1alpha1", "v1")):
        self.crds.create_custom_resource_definition(crd_manifest(self.group, storage, versions))
        self.wait_served(storage)

    def wait_served(self, version: str, timeout: float = 30.0):
        """Poll until the apiserver serves the new version (CRDs are established asynchronously)."""
        from kubernetes.client.rest import ApiException

        deadline = time.monotonic() + timeout
        while True:
            try:
                self.objects.list_namespaced_custom_object(self.group, version, self.namespace, "widgets")
                return
            except ApiException as error:
                if error.status != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def switch_storage(self, storage: str):
        crd = self.crds.read_custom_resource_definition(self.resource)
        for version in crd.spec.versions:
            version.storage = version.name == storage
        self.crds.replace_custom_resource_definition(self.resource, crd)

    def create_widget(self, version: str, name: str, spec: dict):
        body = {"apiVersion": f"{self.group}/{version}", "kind": "Widget", "metadata": {"name": name}, "spec": spec}
        return self.objects.create_namespaced_custom_object(self.group, version, self.namespace, "widgets", body)

    def widgets(self, version: str = "v1") -> dict:
        items = self.objects.list_namespaced_custom_object(self.group, version, self.namespace, "widgets")["items"]
        return {item["metadata"]["name"]: item["spec"] for item in items}

    def stored_versions(self):
        return list(self.crds.read_custom_resource_definition(self.resource).status.stored_versions or [])

    def storage_state(self):
        from kubernetes.client.rest import ApiException

        try:
            return self.objects.get_cluster_custom_object(*STORAGE_STATES, self.resource)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def cleanup(self):
        from kubernetes.client.rest import ApiException

        for delete in (lambda: self.objects.delete_cluster_custom_object(*STORAGE_STATES, self.resource),
                       lambda: self.crds.delete_custom_resource_definition(self.resource),
                       lambda: self.core.delete_namespace(self.namespace)):
            try:
                delete()
            except ApiException as error:
                if error.status != 404:
                    raise

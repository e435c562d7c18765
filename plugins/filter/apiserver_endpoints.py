# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filter ``apiserver_endpoints``: one apiserver URL per control-plane host (docs in the .yml beside this one).

Every role computes its default endpoint list with this one filter, so the rule (the host variable
``kubeupgrade_apiserver_url``, else ``https://<ansible_host>:6443``) lives in one place.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

DEFAULT_PORT = 6443


def apiserver_endpoints(hosts, hostvars, port=DEFAULT_PORT):
    """``groups['kube_control_plane'] | apiserver_endpoints(hostvars)`` -> ``['https://10.0.0.11:6443', ...]``."""
    if hosts is None:
        return []
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError(f"apiserver_endpoints expects a list of inventory host names, got {type(hosts).__name__}")
    urls = {}
    for host in hosts:
        facts = hostvars[host] if host in hostvars else {}
        url = facts.get("kubeupgrade_apiserver_url") or f"https://{facts.get('ansible_host') or host}:{int(port)}"
        urls.setdefault(str(url).rstrip("/"), []).append(host)
    shared = {url: names for url, names in urls.items() if len(names) > 1}
    if shared:
        raise AnsibleFilterError(
            "; ".join(f"hosts {', '.join(names)} share the apiserver URL {url}" for url, names in shared.items())
            + ": each control-plane host needs the URL of its own apiserver (kubeupgrade_apiserver_url, or "
              "ansible_host), never a load balancer's, which hides an apiserver that disagrees.")
    return list(urls)


class FilterModule:
    def filters(self):
        return {"apiserver_endpoints": apiserver_endpoints}

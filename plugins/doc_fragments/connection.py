# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the shared connection options (kubernetes.core names and environment fallbacks)."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig content as a dictionary.
      - Its shape is checked before it is used (lists of named clusters, contexts and users holding mappings, and
        the type of every field read from them); a wrong type is refused naming the field, never showing its value.
      - The certificates and key of its C(*-data) fields are never written to the shared temporary directory. On Linux
        they stay in an anonymous memory file of the module's process; elsewhere, and for a kubeconfig read through the
        C(kubernetes) package's loaders (exec plugins, auth providers), they go to a private C(kubeupgrade-keys-<pid>-*)
        directory (mode 0700) in it, removed at exit and, after a killed run, by the next module run.
      - When neither O(kubeconfig) nor O(host) is given, C(~/.kube/config) is used if it exists, else the in-cluster
        service account configuration.
      - Falls back to the E(K8S_AUTH_KUBECONFIG) environment variable.
    type: raw
  context:
    description:
      - The kubeconfig context to use. Defaults to the kubeconfig's current context.
      - Falls back to E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - The Kubernetes API URL, for example C(https://10.0.0.10:6443). Overrides the kubeconfig's server.
      - A URL with credentials in it (C(https://user:password@...)) is refused, without showing them, here as in
        O(endpoints), O(proxy) and the kubeconfig (the apiserver does not read them, and URLs are shown in results
        and reports). Give credentials through O(api_key), O(username)/O(password), client certificates or the
        kubeconfig user.
      - Falls back to E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - A bearer token. Overrides the kubeconfig's credentials. Falls back to E(K8S_AUTH_API_KEY).
    type: str
  username:
    description:
      - Username for basic authentication. Falls back to E(K8S_AUTH_USERNAME).
    type: str
  password:
    description:
      - Password for basic authentication. Falls back to E(K8S_AUTH_PASSWORD).
    type: str
  validate_certs:
    description:
      - Whether to verify the apiserver's TLS certificate.
      - When unset, the kubeconfig's C(insecure-skip-tls-verify) decides, and certificates are verified by default.
      - Falls back to E(K8S_AUTH_VALIDATE_CERTS) or E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA certificate used to verify the apiserver. Falls back to E(K8S_AUTH_CA_CERT) or E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate. Falls back to E(K8S_AUTH_CLIENT_CERT) or E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the client certificate's key. Falls back to E(K8S_AUTH_CLIENT_KEY) or E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  proxy:
    description:
      - URL of an HTTP proxy to reach the apiservers through. Falls back to E(K8S_AUTH_PROXY).
      - Without credentials in it; give the proxy's user and password as O(proxy_headers.proxy_basic_auth).
    type: str
  no_proxy:
    description:
      - Comma-separated hosts, domains or CIDRs that bypass O(proxy). Falls back to E(K8S_AUTH_NO_PROXY).
    type: str
  proxy_headers:
    description:
      - Headers sent to the proxy.
    type: dict
    suboptions:
      proxy_basic_auth:
        description: C(user:password) for the proxy.
        type: str
      basic_auth:
        description: C(user:password) sent as basic authentication.
        type: str
      user_agent:
        description: User agent sent to the proxy.
        type: str
  impersonate_user:
    description:
      - Username to impersonate. Falls back to E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description:
      - Groups to impersonate.
    type: list
    elements: str
  request_timeout:
    description:
      - Seconds to wait for one HTTP answer from an apiserver, above C(0) and at most C(3600).
    type: float
    default: 30.0
requirements:
  - kubernetes >= 30.1.0 (Python client, for its kubeconfig and in-cluster loaders)
notes:
  - "Modules talk to each apiserver directly; run them where the apiservers are reachable, usually the controller
    (C(delegate_to: localhost)) or an execution environment."
"""

    ENDPOINTS = r"""
options:
  endpoints:
    description:
      - Base URLs of every apiserver to query separately, for example C(https://10.0.0.11:6443), one per control-plane
        node. Query each apiserver directly, not through a load balancer, or disagreements stay hidden.
      - The credentials of the connection options are used for every endpoint.
      - When empty, the connection's O(host) (or the kubeconfig's server) is the only endpoint.
    type: list
    elements: str
    default: []
"""

# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``storage_version_agreement`` module's run: check the options, wait for agreement, return its result."""

from __future__ import annotations

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.wait import AgreementWait, result_fields, wait_for_agreement
from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import check_accept, check_at_least


def run(module) -> dict:
    """Agreement of every endpoint for ``polls`` consecutive polls; a DisagreementError carries the failure's result."""
    params = module.params
    check_at_least("polls", params["polls"], 1)
    check_accept(params["accept"])
    check_at_least("interval", params["interval"], 0)
    check_at_least("timeout", params["timeout"], 0)  # 0: one observation, no waiting
    observer = apiserver_io.observer_for(module)
    last = {}

    def remember(_polls, _agreement, observation):
        last["observation"] = observation

    wait = AgreementWait(polls=params["polls"], interval=params["interval"], timeout=params["timeout"],
                         require_ready=params["require_ready"], accepted=tuple(params["accept"] or {}))
    agreement, polls = wait_for_agreement(observer, params["resources"] or None, wait, on_poll=remember)
    result = result_fields(agreement, last["observation"], polls, agreed=True)
    result.update(changed=False, msg=f"all {len(observer.clients)} apiserver(s) agree on {len(agreement.hashes)} resource(s) "
                                     f"for {params['polls']} consecutive poll(s)")
    return result

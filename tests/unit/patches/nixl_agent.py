"""The part of a stand-in for NIXL's agent (``nixl._api.nixl_agent``) that the patch tests share: memory registration,
descriptor lists and handle release, which NIXL with a storage backend does for real and which cannot run here.
Each test's agent adds what it observes (overlapping transfer preparation, the transfers made)."""

from __future__ import annotations


class NixlAgentStandIn:
    def create_backend(self, backend, params):
        self.backend = (backend, dict(params))

    def register_memory(self, reg_list, mem_type):
        return ("reg", mem_type, len(reg_list))

    def get_xfer_descs(self, descs, mem_type):
        return ("descs", mem_type, len(descs))

    def prep_xfer_dlist(self, agent_name, descs, mem_type):
        return ("dlist", mem_type)

    def release_xfer_handle(self, handle):
        pass

    def release_dlist_handle(self, handle):
        pass

"""Azure's services that cannot run on this machine, played with their real wire formats: the
rehearsal serves them to its nodes (:mod:`nodekit.rehearsal.services` starts them), and the
tests import them from here.

- :mod:`.azure_node`: the instance metadata service (each node's identity tokens, compute
  metadata and scheduled events) and Key Vault;
- :mod:`.azure_compute`: Azure Compute for the workers' scale sets, the head's VM and the
  autoscale settings.

Each runs in-process (``FakeImds(folder).start()``) or as a process
(``python -m nodekit.rehearsal.standins.azure_node imds ...``), with the interpreter the rest
of the package runs with. Blob storage is Azurite, Azure's own emulator
(:mod:`nodekit.rehearsal.services.azurite`).
"""

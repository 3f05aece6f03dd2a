"""The rehearsal cluster: the committed cloud-init documents booted for real, on this machine.

One head and N workers run as Debian 12 systemd-nspawn containers, each in its own network
namespace on a private bridge, each seeded (NoCloud) with ``cloud-init/rendered/*.yaml`` whose
placeholders are filled exactly as Terraform and Bicep fill them. The containers reach packages
only through what the host serves on the bridge (caching mirrors of the Debian archive and of
PyPI, and the pinned torch wheel); there is no NAT and no route out.

One module per concern, each with a small interface:

- :mod:`nodekit.rehearsal.image` builds and caches the root filesystem and the torch wheel;
- :mod:`nodekit.rehearsal.network`: the bridge, each node's network namespace and link;
- :mod:`nodekit.rehearsal.nodes`: the node containers (overlay disk, NoCloud seed, the nspawn
  supervisor, exec, reboot/poweroff/crash, readiness markers);
- :mod:`nodekit.rehearsal.services`: what the nodes reach on the bridge, one module per stand-in
  (package mirrors with :mod:`nodekit.rehearsal.mirrors`, Key Vault, the metadata service,
  Compute; the next one, Azurite, goes there too);
- :mod:`nodekit.rehearsal.standins`: the servers that play Azure's metadata service, Key Vault
  and Compute with their wire formats (the services start them; the tests use them too);
- :mod:`nodekit.rehearsal.state`: ``state.json``, what a cluster is made of;
- :mod:`nodekit.rehearsal.cluster` (``Rehearsal``) puts them together: ``up``, ``add_workers``,
  the fake scale set's hooks, ``status``, and ``down``, which removes every trace again, also
  after a failed ``up``.

Requires root on Linux with debootstrap, systemd-nspawn (systemd-container), iproute2 and
apt-cacher-ng.
"""

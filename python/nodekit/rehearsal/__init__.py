"""The rehearsal cluster: the committed cloud-init documents booted for real, on this machine.

One head and N workers run as Debian 12 systemd-nspawn containers, each in its own network
namespace on a private bridge, each seeded (NoCloud) with ``cloud-init/rendered/*.yaml`` whose
placeholders are filled exactly as Terraform and Bicep fill them. The containers reach packages
only through what the host serves on the bridge (caching mirrors of the Debian archive and of
PyPI, and the pinned torch wheel); there is no NAT and no route out.

- :mod:`nodekit.rehearsal.image` builds and caches the root filesystem and the torch wheel;
  :mod:`nodekit.rehearsal.mirrors` runs the caching mirrors (apt-cacher-ng, proxpi).
- :mod:`nodekit.rehearsal.cluster` creates the network and the nodes, boots them, waits for their
  readiness markers, and removes every trace again (``down``), also after a failed ``up``.

Requires root on Linux with debootstrap, systemd-nspawn (systemd-container), iproute2 and
apt-cacher-ng.
"""

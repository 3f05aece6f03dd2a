"""What the tests of the nodes' bootstrap share: a node's files as the bootstrap probes them."""

from __future__ import annotations

from pathlib import Path


def probe_tree(
    root: Path, gpus: int = 0, os_id: str = "ubuntu", kernel: str = "6.8.0-1021-azure"
) -> Path:
    """A fake node for the bootstrap's PROBE_ROOT: PCI devices in /sys (``gpus`` NVIDIA GPUs,
    besides an NVIDIA audio function and a Hyper-V NIC that are no GPUs), /etc/os-release and
    the running kernel."""
    devices = root / "sys" / "bus" / "pci" / "devices"
    entries = [("0x1414", "0x020000"), ("0x10de", "0x040300")]  # Hyper-V NIC, HDMI audio
    entries += [("0x10de", "0x030200" if i % 2 == 0 else "0x030000") for i in range(gpus)]
    for i, (vendor, klass) in enumerate(entries):
        dev = devices / f"0000:00:{i:02x}.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text(vendor + "\n")
        (dev / "class").write_text(klass + "\n")
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "os-release").write_text(f'PRETTY_NAME="x"\nID={os_id}\nVERSION_ID="1"\n')
    (root / "proc" / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text(kernel + "\n")
    return root

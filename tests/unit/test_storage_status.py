"""``status``'s line on the cluster storage (docs/results-and-storage.md: "Cluster storage")."""

from __future__ import annotations

from driver import layout
from driver.cli.jobs import storage_line


def test_a_mounted_storage_names_its_folder_and_container() -> None:
    line = storage_line(
        {
            "configured": True,
            "mounted": True,
            "path": layout.CLUSTER_STORAGE_DIR,
            "account": "rlresults42",
            "container": "results",
        }
    )
    assert line.startswith(f"cluster storage: {layout.CLUSTER_STORAGE_DIR} on every node")
    assert "rlresults42/results" in line


def test_a_cluster_without_storage_says_what_tune_then_needs() -> None:
    line = storage_line({"configured": False, "mounted": False})
    assert line.startswith("cluster storage: none")
    assert "storage_path every node reaches" in line


def test_storage_configured_but_not_mounted_is_said_with_where_to_look() -> None:
    line = storage_line(
        {
            "configured": True,
            "mounted": False,
            "path": "/x",
            "account": "a\x1b[2J",
            "container": "c",
        }
    )
    assert line.startswith("cluster storage: NOT MOUNTED on the head")
    assert "journalctl -u ray-storage" in line
    assert "\x1b" not in line  # what the head wrote is not trusted with the terminal

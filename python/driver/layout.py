"""Where things live on a cluster node and which ports Ray uses there.

One source of truth for the cloud-init renderer (what the nodes are told) and the driver (what
it looks for on the head over SSH). Change a value here, re-render (``python -m nodekit render``)
and the golden-file test shows every document that moves.
"""

from __future__ import annotations

# Ports. Only SSH (22) is open from outside the virtual network; the rest stay private.
RAY_GCS_PORT = 6379
"""Ray's GCS on the head's private IP: workers join here."""
RAY_DASHBOARD_PORT = 8265
"""Dashboard and Jobs API, bound to 127.0.0.1 on the head: reached only through an SSH tunnel."""
RAY_CLIENT_PORT = 10001
"""Ray Client server on the head (token-protected)."""
TENSORBOARD_PORT = 6006
"""TensorBoard over the results folder, bound to 127.0.0.1 on the head."""
HEALTH_PORT = 8790
"""A worker's health endpoint for the scale set's Application Health extension, bound to
127.0.0.1 (the extension probes from inside the VM); no NSG rule names it. Below Ray's worker
ports (10002-19999) and the kernel's ephemeral range. The Terraform stack's copy
(infra/terraform/modules/cluster/locals.tf) is held to this one by a test."""
HEALTH_PATH = "/health"

# Accounts.
ADMIN_USER = "azureuser"
"""The VM admin user both stacks create by default, and the driver's default SSH user
(cloud-init/placeholders.yaml's RAY_ADMIN_USER default; a test holds the two together)."""
RAY_USER = "ray"
"""Unprivileged system user that runs Ray; its group may read the token and results."""
HEALTH_USER = "ray-health"
"""System user of a worker's health endpoint: reads the markers, asks systemd about Ray; not in
group ``ray`` (no token)."""

# Paths.
CONFIG_DIR = "/etc/ray-cluster"
DEPLOY_VALUES = f"{CONFIG_DIR}/deploy.json"
"""Deploy-time values (cloud-init/placeholders.yaml) as one JSON object of strings, root-only."""
AUTOSCALER_CONFIG = f"{CONFIG_DIR}/autoscaler.yaml"
"""On the head with scaling_mode = "ray": Ray's autoscaler configuration (ray start --head
--autoscaling-config), written at boot from the deploy-time values."""
AUTOSCALER_SCORER = "azure_vmss_provider.availability_scorer"
"""On the head with scaling_mode = "ray": Ray's RAY_AUTOSCALER_UTILIZATION_SCORER, the node
provider's scorer that ranks a pool Azure refused after those that can serve the demand
(python/nodekit/node/azure_vmss_provider.py's availability_scorer, as the head imports that
module: a test holds the name to it)."""
OS_PACKAGES = f"{CONFIG_DIR}/os-packages.txt"
"""The Debian/Ubuntu packages the bootstrap installs, one a line."""
NODE_ENV = f"{CONFIG_DIR}/node.env"
"""Environment for the Ray services (auth mode, token path, display), readable by ray."""
TOKEN_FILE = f"{CONFIG_DIR}/cluster-token"
"""The cluster's Ray token: mode 0640, group ray (the admin user is a member)."""
VENV_DIR = "/opt/ray-cluster/venv"
STATE_DIR = "/var/lib/ray-cluster"
INSTALL_MARKER = f"{STATE_DIR}/installed.json"
"""Written by the bootstrap's install phase once the node's environment is complete (JSON: the
install digest, Ray/torch versions, the extras, seconds taken). A node whose image holds the
marker with the expected digest skips the install at boot (cloud-init/rendered/install.sh bakes
such an image)."""
READY_MARKER = f"{STATE_DIR}/ready"
"""Written once the node's Ray is up (and, on the head, answering); holds a JSON status."""
FAILED_MARKER = f"{STATE_DIR}/failed"
"""Written when the bootstrap gave up; holds the reason on one line."""
RESTART_FAILED_MARKER = f"{STATE_DIR}/restart-failed"
"""Written at a later boot when Ray did not come back in time (ray-node-ready.service)."""
RAY_STOP_DRAIN_S = 5
"""How long a stopping Ray node drains before it ends its processes (Ray's
RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S, 30 by default). RLlib's env runners never finish, so the
default would add 30 s to every stop; a worker told of its removal has already been drained by
the scheduled-events watcher with the notice's own deadline."""
NO_PORT = 65536
"""Beyond the last TCP port: what a listener Ray must not start is told to bind to."""
RAY_NO_METRICS_ENV = {
    "RAY_enable_metrics_collection": "0",
    "DASHBOARD_METRIC_PORT": str(NO_PORT),
    "AUTOSCALER_METRIC_PORT": str(NO_PORT),
}
"""Environment for Ray on every node and on the driver's local head: no Prometheus endpoints.
Ray serves metrics on every interface, with no token asked: each node's agent (metrics
collection), and on a head the dashboard (DASHBOARD_METRIC_PORT, 44227) and the autoscaler
monitor (AUTOSCALER_METRIC_PORT, 44217), whatever addresses Ray was given. A port no socket
can have makes those two fail to start (Ray logs it and goes on without them). Nothing here
scrapes them (no Prometheus, no Grafana), and metrics collection took ~1.6 CPU s a minute of an
idle head (a third of its idle CPU; benchmarks/README.md)."""
AUTOSTOP_STATE = f"{STATE_DIR}/autostop.json"
"""On the head: what the autostop agent last saw and decided (JSON: idle since when, the busy
jobs and SSH connections, the decision); ``python -m driver status`` reads it."""
AUTOSTOP_LOG = f"{STATE_DIR}/autostop.log"
"""On the head: the autostop agent's decisions, one line each (also in its journal)."""
RESUME_DIR = f"{STATE_DIR}/resume"
"""On the head's OS disk: the jobs that held it for an eviction notice, one file each, submitted
again once its Ray is back (python/nodekit/node/scheduled_events.py, ``Resumer``)."""
RESULTS_DIR = f"{STATE_DIR}/results"
"""Jobs write results and checkpoints to RESULTS_DIR/<submission id> on the head."""
CLUSTER_STORAGE_DIR = "/mnt/cluster_storage"
"""On every node: the cluster's Blob container (RESULTS_URL), mounted at boot by rclone with the
node's managed identity before Ray starts (ray-storage.service). One folder all nodes share and
that outlives the cluster: Tune's and Train's default storage (the ray user's ~/ray_results)
is a link to its ``ray_results`` folder. Absent on a cluster deployed without results storage."""
STORAGE_ENV = f"{CONFIG_DIR}/storage.env"
"""The cluster storage's rclone settings (account, endpoint, identity), written at boot."""
IMDS_ENDPOINT = "http://169.254.169.254"
"""Azure's instance metadata service, as every VM sees it (managed identity tokens, scheduled
events); the rehearsal cluster serves a fake at the same address inside each node."""
XVFB_DISPLAY = ":99"
"""The virtual display every node runs for headless simulators (DISPLAY for Ray's workers)."""
SIMULATOR_RESOURCE = "simulator"
"""The custom resource each worker offers to Ray, one unit per CPU: jobs that start a simulator
process per env ask for one unit per env, so no node runs more simulators than it has cores
(examples/pixels)."""
POOL_LABEL = "pool"
"""The Ray node label every worker carries with its pool's name (``ray start --labels``; the
autoscaler's node types say the same), so a job can pin work to a pool."""

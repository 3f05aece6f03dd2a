"""Code that runs on the cluster's nodes, not here: standard library only (plus the node's own
Ray where it says so). The renderer embeds these files into the cloud-init documents; the tests
import them directly."""

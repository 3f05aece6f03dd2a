"""A Tune sweep that names its own storage: two PPO trials on CartPole (one learning rate each)
whose checkpoints and experiment state go straight to Azure Blob Storage through
``pyarrow.fs.AzureFileSystem``, with no shared folder on the nodes.

The container and the identity come from the job's environment, as the cluster hands them to
every job when it has results storage: ``RAYDRIVER_RESULTS_URL``
(``https://ACCOUNT.blob.core.windows.net/CONTAINER``; an emulator's path-style
``https://HOST:PORT/ACCOUNT/CONTAINER`` gives pyarrow its ``blob_storage_authority`` and
``dfs_storage_authority``, both of which pyarrow 26 needs) and
``RAYDRIVER_RESULTS_CLIENT_ID`` (the nodes' managed identity). The sweep lands in
``CONTAINER/ray_results/NAME/``, where ``python -m driver runs|download|plot`` find it.

    python -m driver submit examples/tune_abfs/sweep.py -- --name lr-sweep --iterations 20

Submitted again with the same name (after a lost head, say), it resumes the sweep from the
state in Blob storage instead of starting over. Prints one ``TRIAL {...}`` line per trial.
"""

from __future__ import annotations

import argparse
import json

from pyarrow.fs import AzureFileSystem

from harness import blobsync


def storage() -> tuple[str, AzureFileSystem]:
    """Tune's ``storage_path`` (``CONTAINER/ray_results``) and the file system it is in."""
    try:
        store = blobsync.from_env()
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    if store is None or not store.client_id:
        raise SystemExit(
            f"error: {blobsync.URL_ENV} and {blobsync.CLIENT_ID_ENV} must name the container and "
            "the managed identity (a cluster with results storage sets both for every job)"
        )
    emulator = {}
    if store.authority:  # Azurite: its address instead of ACCOUNT.{blob,dfs}.core.windows.net
        emulator = {
            "blob_storage_authority": store.authority,
            "dfs_storage_authority": store.authority,
        }
    # pyarrow aborts the process (SIGABRT) when it gets no token: ask for one first, which fails
    # with one line (an identity not attached to this VM, no metadata service).
    try:
        blobsync.Client(store, "").token()
    except blobsync.StoreError as e:
        raise SystemExit(f"error: {e}") from None
    fs = AzureFileSystem(store.account, client_id=store.client_id, **emulator)
    return f"{store.container}/ray_results", fs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", default="cartpole-abfs", help="the experiment's folder name")
    p.add_argument("--iterations", type=int, default=4, help="training iterations per trial")
    p.add_argument("--checkpoint-every", type=int, default=10, help="and one at the end")
    args = p.parse_args()
    storage_path, fs = storage()
    from ray import tune  # after the checks above, which then answer at once
    from ray.rllib.algorithms.ppo import PPOConfig

    path = f"{storage_path}/{args.name}"
    if tune.Tuner.can_restore(path, storage_filesystem=fs):
        print(f"resuming the sweep in {path}", flush=True)
        tuner = tune.Tuner.restore(path, "PPO", storage_filesystem=fs, resume_errored=True)
    else:
        config = (
            PPOConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=0)
            .training(
                lr=tune.grid_search([1e-3, 3e-4]),
                train_batch_size_per_learner=400,
                minibatch_size=100,
                num_epochs=2,
            )
        )
        tuner = tune.Tuner(
            "PPO",
            param_space=config,
            run_config=tune.RunConfig(
                name=args.name,
                storage_path=storage_path,
                storage_filesystem=fs,
                stop={"training_iteration": args.iterations},
                checkpoint_config=tune.CheckpointConfig(
                    checkpoint_frequency=args.checkpoint_every, checkpoint_at_end=True
                ),
                # A trial whose actor is lost (a Spot worker taken) goes on from its last
                # checkpoint in Blob storage, on any node.
                failure_config=tune.FailureConfig(max_failures=2),
            ),
        )
    for r in tuner.fit():
        if r.error:
            raise SystemExit(f"error: a trial failed: {r.error}")
        print("TRIAL " + json.dumps({"iterations": r.metrics["training_iteration"],
                                      "lr": r.config["lr"], "checkpoint": r.checkpoint.path,
                                      "path": r.path}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

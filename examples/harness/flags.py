"""The flags every example takes, with per-example defaults."""

from __future__ import annotations

import argparse
import math

from harness.runs import check_run


def _optional_float(text: str) -> float | None:
    """A number, or ``none`` to switch the condition off (an example's default may set it)."""
    if text.strip().lower() in ("none", "off", ""):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("expected a number, got nan")
    return value


def _optional_count(text: str) -> int | None:
    if text.strip().lower() in ("none", "off", ""):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number or 'none', got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _optional_seconds(text: str) -> float | None:
    """A number of seconds, 0 or more, or ``none`` for the algorithm's own default."""
    value = _optional_float(text)
    if value is not None and (value < 0 or math.isinf(value)):
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds, got {text!r}")
    return value


def _run(text: str) -> str:
    try:
        return check_run(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser(
    doc: str | None,
    *,
    stop_reward: float | None = None,
    max_env_steps: int | None = None,
    max_iterations: int | None = None,
    stop_seconds: float | None = None,
    checkpoint_every: int = 10,
    num_env_runners: int = 1,
) -> argparse.ArgumentParser:
    """An argument parser with the harness's flags; the example adds its own and parses.

    The keyword arguments are the example's defaults (the numbers its README's targets were
    measured with). Every budget counts over the whole run, including the runs it resumes, as
    Tune's ``training_iteration`` does: re-running a killed job with ``--resume ID`` and the same
    flags finishes the original budget instead of starting a new one.
    """
    description = (doc or "").strip().split("\n\n")[0]
    p = argparse.ArgumentParser(
        description=description,
        epilog="Budgets count over the run and the runs it resumes. 'none' switches a stop "
        "condition off. Results, checkpoints, progress.csv and TensorBoard files go to "
        "--results-dir (default $RAYDRIVER_RESULTS_DIR, set by `python -m driver submit`).",
    )
    g = p.add_argument_group("stop conditions (the first one met ends the run)")
    g.add_argument(
        "--stop-reward",
        "--target",
        dest="stop_reward",
        type=_optional_float,
        default=stop_reward,
        metavar="R",
        help=f"stop when the mean episode return reaches R (default: {stop_reward}); "
        "the job exits 1 if it ends without reaching it",
    )
    g.add_argument(
        "--max-env-steps",
        type=_optional_count,
        default=max_env_steps,
        metavar="N",
        help=f"stop after N sampled env steps (default: {max_env_steps})",
    )
    g.add_argument(
        "--max-iterations",
        type=_optional_count,
        default=max_iterations,
        metavar="N",
        help=f"stop after N training iterations (default: {max_iterations})",
    )
    g.add_argument(
        "--stop-seconds",
        type=_optional_float,
        default=stop_seconds,
        metavar="S",
        help=f"stop after S seconds of training (default: {stop_seconds})",
    )
    g = p.add_argument_group("checkpoints and resume")
    g.add_argument(
        "--checkpoint-every",
        type=_count,
        default=checkpoint_every,
        metavar="N",
        help=f"save a checkpoint every N iterations, 0 for only at the end "
        f"(default: {checkpoint_every}); the latest is always RESULTS_DIR/checkpoint",
    )
    g.add_argument(
        "--resume",
        type=_run,
        metavar="RUN",
        help="continue from the latest checkpoint of an earlier run: its submission id (its "
        "folder next to this run's results folder, here or on the head) or a path",
    )
    g.add_argument(
        "--upload-timeout",
        type=_seconds,
        default=600.0,
        metavar="S",
        help="with a results store ($RAYDRIVER_RESULTS_URL): wait at most S seconds at the end "
        "for the last upload, and for fetching a --resume run from the store (default: 600)",
    )
    g = p.add_argument_group("run")
    g.add_argument(
        "--num-env-runners",
        type=_count,
        default=num_env_runners,
        metavar="N",
        help=f"remote env runners sampling in parallel, 0 samples in the learner's process "
        f"(default: {num_env_runners})",
    )
    g.add_argument(
        "--min-iteration-seconds",
        type=_optional_seconds,
        default=None,
        metavar="S",
        help="each training iteration samples and learns for at least S seconds before it "
        "reports (RLlib's min_time_s_per_iteration; default: the algorithm's own, 10 for APPO "
        "and IMPALA, none for PPO and DQN)",
    )
    g.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    g.add_argument(
        "--results-dir",
        default=None,
        metavar="DIR",
        help="where this run writes (default: $RAYDRIVER_RESULTS_DIR, else results/EXAMPLE)",
    )
    return p

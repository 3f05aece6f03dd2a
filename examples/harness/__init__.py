"""The training harness every example shares: one set of flags, one training loop.

An example supplies what is its own (an RLlib config built from the parsed flags, optionally a
final evaluation); the harness owns what every long run needs and what should look the same in
every example: stop conditions, checkpoints every N iterations and at the end, ``--resume`` from
an earlier run's latest checkpoint, ``progress.csv`` and TensorBoard event files in the run's
results folder, env-runner fault tolerance, and the one-line ``RESULT {...}`` summary; and, when
the job's environment names a results container (``$RAYDRIVER_RESULTS_URL``), a copy of the run
in Blob storage that ``--resume`` finds from any head (:mod:`harness.store`).

It reaches a job as a ``py_modules`` folder: each example's ``runtime_env.yaml`` says
``py_modules: [../harness]``, so ``python -m driver submit`` uploads this folder with the job
and Ray makes it importable as ``harness`` on every node (the nodes do not have this
repository's package). Run an example with plain ``python`` as ``PYTHONPATH=examples python
examples/NAME/train.py``.
"""

from harness.flags import parser
from harness.loop import run
from harness.runs import CHECKPOINT, PROGRESS_CSV, SUMMARY_JSON

__all__ = ["CHECKPOINT", "PROGRESS_CSV", "SUMMARY_JSON", "parser", "run"]

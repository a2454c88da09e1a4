"""The jobs behind the `kbert` command: pretraining and fine-tuning runs, their records and outputs,
and the tour.

A job reads files, builds a model from `kbert.models`, `kbert.pretraining`,
`kbert.tasks` or `kbert.checkpoints`, trains it resumably and writes a run
folder. Nothing below imports this package; `kbert.cli` imports it lazily.
"""

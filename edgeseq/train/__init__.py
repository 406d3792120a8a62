"""train(arch, dataset) -> checkpoint: config, weights, normalisation, labels and test figures.

- `edgeseq.train.config`: `TrainConfig`, the per-architecture `DEFAULTS` and the bounds each
  setting is checked against.
- `edgeseq.train.plan`: how an epoch is cut into updates (streams, lanes, chunks) and the
  progress shown while it runs; numpy only.
- `edgeseq.train.loop`: `train` itself (the method is described there), the schedule and
  the scores on the validation and test splits.
- `edgeseq.train.checkpoint`: a run directory written and read back.
- `edgeseq.train.crossfit`: every training sequence predicted by a model trained without it
  (`edgeseq calibrate --split cross`).

Each submodule imports only those listed before it, never this package, which only gathers
their public names.
"""

from edgeseq.train.checkpoint import (CHECKPOINT, CURVE, curve_png, load_checkpoint, model_from_checkpoint,
                                      quiet_torch_load, save_checkpoint, torch_bytes, write_files)
from edgeseq.train.config import (DEFAULTS, EARLY_SETTINGS, TRAIN_LIMITS, TRAIN_OPTIONS, TRAIN_SETTINGS, TrainConfig,
                                  check_train_config, parse_overrides)
from edgeseq.train.loop import (EarlyStopping, accuracy, check_trainable, continuous_accuracy, diagnose, epoch_budget,
                                scored_labels, sequence_logits, train, validation_scores, validation_split)
from edgeseq.train.plan import (Plan, Progress, clock, lane_totals, pieces, plan_epoch, sequence_lanes,
                                training_streams)

__all__ = [
    "CHECKPOINT", "CURVE", "curve_png", "load_checkpoint", "model_from_checkpoint", "quiet_torch_load",
    "save_checkpoint", "torch_bytes", "write_files",
    "DEFAULTS", "EARLY_SETTINGS", "TRAIN_LIMITS", "TRAIN_OPTIONS", "TRAIN_SETTINGS", "TrainConfig",
    "check_train_config", "parse_overrides",
    "EarlyStopping", "accuracy", "check_trainable", "continuous_accuracy", "diagnose", "epoch_budget",
    "scored_labels", "sequence_logits", "train", "validation_scores", "validation_split",
    "Plan", "Progress", "clock", "lane_totals", "pieces", "plan_epoch", "sequence_lanes", "training_streams",
]

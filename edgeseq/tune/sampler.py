"""The sampler of `edgeseq tune`, seeded trial by trial.

A study's trials are numbered by its storage, one number per trial, under a lock (Optuna's
RDB storage locks the study's row; the journal applies one record at a time): whichever worker,
process or machine asks for a trial, no other trial of the study gets its number. So each trial
draws with a seed of its own, `trial_seed(seed, number)`, instead of each worker drawing from one
generator seeded once:

- **Workers on one study draw apart**, however they were started: `--jobs`, or several commands
  (machines) that start together on a new study, which all see no trial yet and would otherwise
  seed alike and draw the same parameters.
- **One worker is reproducible**: trial n draws from its seed and the trials finished before it,
  so the same command on a new study draws the same trials, and a study resumed after its run
  finished the trials an unbroken run would have drawn (not after Ctrl-C: the trial it stopped
  keeps its number, failed).
- **Several workers are not**: which trials a trial sees finished depends on timing (Optuna's FAQ
  says the same of any parallel optimization). A trial the sampler draws at random (NSGA-II's
  first generation, TPE's start-up trials) still draws by its number alone.

Optuna's own practice for threads (`n_jobs`) reseeds each worker's sampler from the operating
system, which keeps workers apart but no run reproducible.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from optuna.samplers import BaseSampler


def trial_seed(seed: int, number: int) -> int:
    """The sampler's seed for trial `number` of a study run with `seed` (0..2**32-1, numpy's range)."""
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


class PerTrialSeed(BaseSampler):
    """`make(trial_seed(seed, trial.number))` samples each trial, from its start (`before_trial`)
    to its end (`after_trial`). The samplers it makes keep their state in the study (NSGA-II's
    generations and parents are trial and study attributes), so a new one per trial draws as the
    one sampler would."""

    def __init__(self, make: Callable[[int], BaseSampler], seed: int):
        self._make, self._seed = make, seed
        self._trials: dict[int, BaseSampler] = {}      # trial number -> its sampler, while it runs

    def _of(self, trial) -> BaseSampler:
        if trial.number not in self._trials:
            self._trials[trial.number] = self._make(trial_seed(self._seed, trial.number))
        return self._trials[trial.number]

    def before_trial(self, study, trial) -> None:
        self._of(trial).before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self._of(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._of(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._of(trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        # also for another worker's trial that this one records as failed (its heartbeat stopped)
        try:
            self._of(trial).after_trial(study, trial, state, values)
        finally:
            self._trials.pop(trial.number, None)

    def reseed_rng(self) -> None:
        """Nothing to reseed: every trial's seed is its own already (Optuna reseeds a sampler
        shared by threads, `n_jobs`, so that they draw apart)."""

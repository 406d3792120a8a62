"""`edgeseq tune`: a multi-objective search for the model a microcontroller should run.

Optuna owns the study, the sampler and the storage; each trial is a thin objective around
`train` + `export --int8` (static) + `eval` + `firmware check`:

- **Data.** Trials train on the training split less a validation split held out of it
  (`edgeseq.data.holdout`: whole groups where the data names groups, else the last quarter of
  each class) and are scored on that validation split. The test split is read once, for the
  chosen model.
- **Objectives** (`OBJECTIVES`): accuracy on both protocols of the int8 model on the
  validation split (never reset, per reading past the grace; per sequence), and on the target
  the calibrated `firmware check` figures: microseconds per reading, flash KB and RAM KB
  (1 KB = 1,024 B).
- **Limits.** A trial over `max_latency_ms`, `max_ram_kb` or `max_flash_kb`, or over the
  part's own RAM or flash, is infeasible: the sampler is told (Optuna's `constraints_func`)
  and it is never on the front nor chosen.
- **Chosen model.** The feasible Pareto trial with the best never-reset accuracy (ties: the
  lower latency), retrained with the same settings on the whole training split, saved with its
  float and int8 exports and scored on the test split on both protocols.

A study lives in an Optuna storage: `study.db` (SQLite) in the output folder by default, or any
storage URL (`postgresql://...`) that workers on several machines share. `--jobs N` runs N
worker processes on this machine against the same storage. A study keeps its settings (data,
target, limits, search space, sampler, seed): resuming or joining it takes them from there. The
target is kept as its whole profile (a `--targets-file` one too), so workers and resumed runs
plan on the same part without reading the file.

**Seeds** (`edgeseq.tune.sampler`): each trial's sampler seed comes from `--seed` and the trial's
number, which the storage gives one trial only. Workers on one study (`--jobs`, or several
commands on one `--storage` started together) never draw alike; one worker on a new study draws
the same trials for a seed, and a study resumed after its run finished the trials an unbroken run
would have; with several workers, what a trial draws from the finished ones depends on timing, so
it is not reproducible.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from edgeseq.errors import DataError, EdgeseqError, UsageError, one_line, printable, safe_text
from edgeseq.tune.figures import OBJECTIVES, int8_figures, over_limits, untrained_figures
from edgeseq.tune.space import APPLIES, QUICK_SPACE, SCHEDULE, SPACE, check_space, describe, suggest  # noqa: F401
from edgeseq.tune.storage import _optuna, close_storage, open_storage, redact

DEFAULT_STUDY = "tune"
STUDY_ATTR = "edgeseq_tune"       # the study's settings, a JSON dict in its user attributes
VALIDATION_FRACTION = 0.25        # of the training sequences, held out for validation
POPULATION = 10                   # NSGA-II: trials per generation (the first ones are drawn at random)
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SAMPLERS = ("nsga2", "tpe")


class TuneInterrupted(EdgeseqError):
    """Ctrl-C: the finished trials are in the storage; the message says how to resume."""

    exit_code = 130


# --- data: validation carved from the training split -----------------------------------------

def validation_mask(split) -> np.ndarray:
    """(N,) bool: the training sequences held out for validation (`edgeseq.data.holdout` with
    its fixed seed, so every worker and every resumed run holds out the same ones)."""
    from edgeseq.data import Split, holdout

    n = len(split)
    rows = Split(np.arange(n, dtype=np.float64).reshape(n, 1, 1), split.y, split.lengths, split.Y, split.groups)
    _, held = holdout(rows, VALIDATION_FRACTION, where="the training split",
                      what="a validation split", remedy="add training sequences (tune holds out about a quarter of "
                      "them, whole groups where the data names groups)")
    mask = np.zeros(n, bool)
    mask[held.X[:, 0, 0].astype(np.int64)] = True
    return mask


def fingerprint(dataset) -> str:
    """sha256 of the training split, labels and features: the same data on any machine."""
    h = hashlib.sha256()
    for a in (dataset.train.X, dataset.train.y, dataset.train.lengths):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(json.dumps([list(dataset.labels), list(dataset.features)]).encode())
    return h.hexdigest()


class Search:
    """What every trial of a study reads: the data split into fit / validation, the target, the
    limits, the space. Built from the study's settings, the same in every worker."""

    def __init__(self, settings: dict, dataset, out: Path, progress: bool = True, study: str = DEFAULT_STUDY):
        from edgeseq.data import Dataset
        from edgeseq.train import check_trainable
        from firmware_sim.targets import get_target, profile_target

        self.settings, self.full, self.out, self.progress, self.study = settings, dataset, Path(out), progress, study
        self.mask = validation_mask(dataset.train)
        train = dataset.train
        self.data = Dataset(dataset.name, train.take(~self.mask), train.take(self.mask), dataset.labels,
                            dataset.features, None, "group" if train.groups is not None else "class")
        check_trainable(self.data)
        kept = settings.get("target_profile")      # studies made before profiles were kept name a built-in one
        self.target = (profile_target(kept, f"study '{study}': its target profile") if kept is not None
                       else get_target(settings["target"]))
        self.space = settings["space"]

    def validation(self) -> dict:
        tr, held = self.full.train, self.mask
        groups = None
        if tr.groups is not None:
            groups = {"training": sorted(set(tr.groups[~held].tolist())),
                      "validation": sorted(set(tr.groups[held].tolist()))}
        return {"held_out": "whole groups" if groups else "the last quarter of each class",
                "fraction": VALIDATION_FRACTION, "training_sequences": int((~held).sum()),
                "validation_sequences": int(held.sum()), "test_sequences_unused": len(self.full.test),
                "groups": groups, "validation_index": np.flatnonzero(held).tolist()}

    def caps(self) -> dict:
        """The limits in force: the given ones, and the part's own RAM and flash."""
        s = self.settings["limits"]
        return {"latency_ms": s["max_latency_ms"],
                "ram_kb": min(x for x in (s["max_ram_kb"], self.target.sram_kb) if x is not None),
                "flash_kb": min(x for x in (s["max_flash_kb"], self.target.flash_kb) if x is not None)}


def constraints(trial) -> list:
    """Optuna's constraints_func: a value above 0 is a broken limit (stored by the trial)."""
    return trial.user_attrs.get("constraints", [1.0])


# --- one trial -------------------------------------------------------------------------------

def objective(trial, search: Search) -> list:
    """Train on the fit split, export static int8, score on the validation split, check on the target."""
    from dataclasses import replace

    from edgeseq.train import DEFAULTS, train
    from export import export_int8

    arch, settings, schedule = suggest(trial, search.space)
    trial.set_user_attr("arch", arch)
    trial.set_user_attr("settings", settings)
    trial.set_user_attr("schedule", schedule)
    caps = search.caps()
    try:
        # bound for the firmware, which has no gain stage: `auto` takes asinh for wide channels
        tc = replace(DEFAULTS[arch], seed=search.settings["seed"], gain_stage=False, **schedule)
        if any(v is not None for v in search.settings["limits"].values()):
            m = untrained_figures(arch, settings, tc, search)
            if m is not None and over_limits(m, caps):             # not trained: no accuracy to report
                return _record(trial, {**m, "never_reset_accuracy": None, "per_sequence_accuracy": None,
                                       "trained": False}, caps)
        ckpt = train(arch, search.data, tc, settings, progress=False)
        if arch == "transformer" and "window" not in settings:      # the window the data gave it, kept so
            settings = {**settings, "window": ckpt["config"]["window"]}     # the retrain on all the training
            trial.set_user_attr("settings", settings)                   # split (longer median?) gets the same
        with tempfile.TemporaryDirectory(prefix=".trial-", dir=search.out) as tmp:     # inside --out
            path = str(Path(tmp) / "int8.onnx")
            q = export_int8(ckpt, path, "static", data=search.data, keep_anyway=True)
            m = int8_figures(path, search.data.test, search.data, search.target)
    except EdgeseqError as e:
        trial.set_user_attr("error", " ".join(str(e).split()))
        raise
    m["int8_within_bounds"] = q["within_bounds"]
    m["train_seconds"] = ckpt["metrics"]["train_seconds"]
    return _record(trial, m, caps)


def _record(trial, m: dict, caps: dict) -> list:
    """Store a trial's figures and broken limits; its values for Optuna (an untrained trial's
    accuracies count as 0: it is infeasible, so never on the front)."""
    trial.set_user_attr("measures", m)
    trial.set_user_attr("constraints", [
        m["latency_us"] / 1000 - caps["latency_ms"] if caps["latency_ms"] is not None else -1.0,
        m["ram_kb"] - caps["ram_kb"], m["flash_kb"] - caps["flash_kb"]])
    return [m[k] or 0.0 for k, *_ in OBJECTIVES]


def _say(search, text):
    if search.progress:                     # a line may hold a path, a study or a data name, an error
        print(safe_text(text), file=sys.stderr, flush=True)


def progress_line(t, caps) -> str:
    """One line per finished trial (stderr)."""
    a = t.user_attrs
    what = describe(a.get("arch", "?"), a.get("settings", {}), a.get("schedule", {}))
    secs = f" ({t.duration.total_seconds():.0f} s)" if t.duration else ""
    if "measures" not in a:
        return f"trial {t.number}: {what}: failed: {a.get('error', t.state.name.lower())}{secs}"
    m = a["measures"]
    broken = over_limits(m, caps)
    if m.get("trained") is False:
        return (f"trial {t.number}: {what}: not trained, over a limit before training: {', '.join(broken)} "
                f"({m['latency_us']:,.0f} us/reading, flash {m['flash_kb']:.1f} KB, RAM {m['ram_kb']:.1f} KB){secs}")
    return (f"trial {t.number}: {what}: never reset {m['never_reset_accuracy']:.3f}, per sequence "
            f"{m['per_sequence_accuracy']:.3f}, {m['latency_us']:,.0f} us/reading, flash {m['flash_kb']:.1f} KB, "
            f"RAM {m['ram_kb']:.1f} KB" + (f"; infeasible: {', '.join(broken)}" if broken else "") + secs)


# --- studies and workers ---------------------------------------------------------------------

def make_sampler(name: str, seed: int):
    """The study's sampler ('nsga2' or 'tpe') in one worker: each trial draws with a seed derived
    from `seed` and its number in the study (`edgeseq.tune.sampler`), so workers on one study never
    draw alike, however they were started, and one worker draws the same trials for a seed."""
    optuna = _optuna()
    from edgeseq.tune.sampler import PerTrialSeed

    def make(trial_seed: int):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if name == "tpe":
                return optuna.samplers.TPESampler(seed=trial_seed, constraints_func=constraints)
            return optuna.samplers.NSGAIISampler(population_size=POPULATION, seed=trial_seed,
                                                 constraints_func=constraints)
    return PerTrialSeed(make, seed)


class _Interrupt:
    """Ctrl-C stops a worker inside a trial's own work (training, export, scoring), which Optuna
    then records as failed, but never inside Optuna's writes to the storage, which a signal
    would leave half done: there it only stops the worker once the write is through."""

    def __init__(self):
        self.inside = False
        self.pending = False

    def __call__(self, signum, frame):
        self.pending = True
        if self.inside:
            raise KeyboardInterrupt

    def run(self, fn, *args):
        if self.pending:
            raise KeyboardInterrupt
        self.inside = True
        try:
            return fn(*args)
        except KeyboardInterrupt:
            self.inside = False
            args[0].set_user_attr("error", "stopped by Ctrl-C")
            raise
        finally:
            self.inside = False


def run_trials(search: Search, storage, study_name: str, n: int) -> None:
    """`n` trials of the study in this process (a worker). KeyboardInterrupt on Ctrl-C."""
    import signal

    optuna = _optuna()
    study = optuna.load_study(study_name=study_name, storage=storage,
                              sampler=make_sampler(search.settings["sampler"], search.settings["seed"]))
    caps = search.caps()
    stop = _Interrupt()

    def finished(study, trial):
        _say(search, progress_line(trial, caps))
        if stop.pending:
            study.stop()

    import sqlalchemy.exc

    previous = signal.signal(signal.SIGINT, stop)
    try:
        with warnings.catch_warnings():         # the heartbeat's check for lost trials is "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.optimize(lambda t: stop.run(objective, t, search), n_trials=n, catch=(EdgeseqError,),
                           gc_after_trial=False, callbacks=[finished])
    except sqlalchemy.exc.SQLAlchemyError as e:     # a database server that went away, or a full disk
        first = " ".join(str(getattr(e, "orig", None) or e).split())[:160]
        raise EdgeseqError(f"the storage failed ({type(e).__name__}: {redact(first)}); the trials finished before are "
                           "kept in it: add trials to the study once it answers again") from None
    finally:
        signal.signal(signal.SIGINT, previous)
    if stop.pending:
        raise KeyboardInterrupt


def worker_main(spec: str | None = None) -> None:
    """Entry point of a worker process (`--jobs`): a JSON spec from `tune`, on stdin (a command line
    is public, and the storage URL may hold a password)."""
    s = json.loads(sys.stdin.read() if spec is None else spec)
    optuna = _optuna()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        from edgeseq.data import load_dataset
        storage = open_storage(s["storage"])
        settings = optuna.load_study(study_name=s["study"], storage=storage).user_attrs[STUDY_ATTR]
        search = Search(settings, load_dataset(s["data"]), Path(s["out"]), s["progress"], s["study"])
        run_trials(search, storage, s["study"], s["trials"])
    except KeyboardInterrupt:
        sys.exit(130)
    except EdgeseqError as e:
        print(f"Error: worker {s['worker']}: {one_line(e)}", file=sys.stderr, flush=True)
        sys.exit(1)


def _workers(search, url, storage, study_name, trials, jobs):
    """`trials` trials over `jobs` workers: this process and jobs - 1 child processes."""
    import signal

    jobs = max(1, min(jobs, trials))
    shares = [trials // jobs + (i < trials % jobs) for i in range(jobs)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = []
    for w in range(1, jobs):
        spec = json.dumps({"storage": url, "study": study_name, "data": search.full.source or search.settings["data"],
                           "out": str(search.out), "progress": search.progress, "trials": shares[w],
                           "worker": w})
        p = subprocess.Popen([sys.executable, "-c", "from edgeseq.tune import worker_main; worker_main()"], env=env,
                             stdin=subprocess.PIPE, stdout=2, text=True)         # stdout: stderr (fd 2)
        procs.append(p)
        p.stdin.write(spec)
        p.stdin.close()
    try:
        run_trials(search, storage, study_name, shares[0])
        codes = [p.wait() for p in procs]
    except BaseException:
        for p in procs:                     # the processes this call started, by their own handle
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        raise
    if any(c == 130 for c in codes):
        raise KeyboardInterrupt
    failed = [w + 1 for w, c in enumerate(codes) if c]
    if failed:
        raise EdgeseqError(f"worker(s) {', '.join(map(str, failed))} stopped with an error (above); the trials they "
                           "finished are kept in the study")


def _settings(stored: dict | None, given: dict, dataset_sha: str | None) -> dict:
    """The study's settings: those it stored (a given value must agree) or, for a new study,
    the given ones with defaults."""
    from firmware_sim.targets import BUILTIN, PLAN_FIELDS, load_targets

    defaults = {"target": "nrf52840", "sampler": "nsga2", "seed": 0, "space": SPACE,
                "limits": {"max_latency_ms": None, "max_ram_kb": None, "max_flash_kb": None}}
    profiles = given.get("profiles") or load_targets()
    if stored is None:
        s = {k: given[k] if given.get(k) is not None else defaults[k] for k in ("target", "sampler", "seed", "space")}
        s["limits"] = {k: given["limits"].get(k) for k in defaults["limits"]}
        s.update(target_profile=profiles[s["target"]].to_json(), data=given["data"] or "basicmotions",
                 data_sha256=dataset_sha, version=2)
        return s
    for key, flag in (("target", "--target"), ("sampler", "--sampler"), ("seed", "--seed"), ("space", "--quick")):
        if given.get(key) is not None and given[key] != stored[key]:
            was = {"space": "another search space"}.get(key, f"{flag} {stored[key]}")
            raise UsageError(f"study '{given['study']}' was run with {was}; resume it with the same (or leave "
                             f"{flag} out), or start a new --study")
    for key, v in given["limits"].items():
        if v is not None and v != stored["limits"][key]:
            old, flag = stored["limits"][key], f"--{key.replace('_', '-')}"
            raise UsageError(f"study '{given['study']}' was run with "
                             + (f"{flag} {old:g}" if old is not None else f"no {flag}")
                             + "; resume it with the same limits (or leave them out), or start a new --study")
    name, kept = stored["target"], stored.get("target_profile")
    filed = profiles[name].to_json() if name not in BUILTIN and name in profiles and kept is not None else {}
    changed = [k for k in PLAN_FIELDS if k in filed and filed[k] != kept.get(k)]    # not text: part, source, note
    if changed:
        key = changed[0]
        was, now = repr(kept.get(key))[:40], repr(getattr(profiles[name], key))[:40]
        raise UsageError(f"study '{given['study']}' was run on target '{name}' with {key} {was}, which "
                         f"{given['targets_file']} now gives as {now}; resume it with the profile it was run with "
                         "(or leave --targets-file out), or start a new --study")
    if dataset_sha is not None and dataset_sha != stored["data_sha256"]:
        raise UsageError(f"study '{given['study']}' was run on other data ('{stored['data']}'); pass the same data "
                         "with --data (or leave it out), or start a new --study")
    return stored


def _stored(storage, name: str, url: str) -> dict:
    """The settings of study `name`, which another machine may have created a moment ago and be
    about to write them."""
    optuna = _optuna()
    for _ in range(20):
        stored = optuna.load_study(study_name=name, storage=storage).user_attrs.get(STUDY_ATTR)
        if stored is not None:
            return stored
        time.sleep(0.25)
    raise UsageError(f"study '{name}' in {redact(url)} was not made by edgeseq tune; choose another --study")


def tune(out, data: str | None = None, target: str | None = None, trials: int = 20, jobs: int = 1,
         seed: int | None = None, sampler: str | None = None, max_latency_ms: float | None = None,
         max_ram_kb: float | None = None, max_flash_kb: float | None = None, storage: str | None = None,
         study: str | None = None, space: dict | None = None, progress: bool = True,
         targets_file: str | os.PathLike | None = None) -> dict:
    """Run `trials` more trials of a study, then write the Pareto front and the chosen model to
    `out` (see the module docstring). Options left None come from an existing study (`study`
    names one to resume or join) or default (nrf52840, nsga2, seed 0, `SPACE`). `targets_file`:
    a JSON file of more target profiles (`firmware_sim.targets.load_targets`) that `target` may
    name; a new study keeps the target's whole profile, and a resumed one is refused if the file
    gives its target other figures. Returns what pareto.json holds; its 'chosen' is None when no
    trial is feasible ('notice' says why).

    Reproducible: one worker (`jobs` 1, no other run on the study) on a new study draws the same
    trials for a `seed`, and a study resumed after its run finished draws what an unbroken run
    would have. Not reproducible: a study run by several workers at once (`jobs` > 1, or other
    runs on a shared `storage`), though each draws its own trials (each trial's sampler seed
    comes from `seed` and its number in the study, `edgeseq.tune.sampler`).

    UsageError for a bad option or one that disagrees with the study's; DataError for a targets
    file that cannot be used; TuneInterrupted on Ctrl-C (the finished trials stay in the storage)."""
    from edgeseq.data import load_dataset
    from edgeseq.tune.pages import summarize, write_pages

    optuna = _optuna()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out '{out}' is a file; give a directory for the study, the front and the chosen model")
    for name, v in (("--trials", trials), ("--jobs", jobs)):
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "--trials" else 1):
            raise UsageError(f"{name} must be a whole number of at least {0 if name == '--trials' else 1}, got {v!r}")
    limits = {"max_latency_ms": max_latency_ms, "max_ram_kb": max_ram_kb, "max_flash_kb": max_flash_kb}
    for key, v in limits.items():
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise UsageError(f"--{key.replace('_', '-')} must be a number above 0, got {v!r}")
    if sampler is not None and sampler not in SAMPLERS:
        raise UsageError(f"unknown sampler '{sampler}'; choose {' or '.join(SAMPLERS)}")
    if study is not None and not STUDY_NAME.fullmatch(study):
        raise UsageError(f"--study '{study[:40]}' must be 1-64 letters, digits, '_', '.' or '-', starting with a "
                         "letter or digit")
    if space is not None:
        space = check_space(space)
    from firmware_sim.targets import get_target, load_targets
    profiles = load_targets(targets_file)                # DataError for a file that cannot be used

    url = storage or f"sqlite:///{(out / 'study.db').resolve()}"
    _check_out_is_this_studys(out, study or DEFAULT_STUDY, redact(url))
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)      # our progress line says what a trial did
    st = None
    try:
        name = study or DEFAULT_STUDY
        # A default storage not yet written holds no study: nothing is written before the request is checked.
        st = open_storage(url) if storage or (out / "study.db").exists() else None
        existing = st is not None and name in optuna.get_all_study_names(st)
        if existing and study is None:
            raise UsageError(f"{redact(url)} already holds study '{name}': pass --study {name} to add trials to it, "
                             "or choose another --out")
        if not existing and trials == 0:
            raise UsageError(f"--trials 0 writes the front of an existing study; {redact(url)} has no study '{name}'")
        stored = _stored(st, name, url) if existing else None
        if target is not None and target not in profiles and (stored or {}).get("target") != target:
            get_target(target, targets_file)             # UsageError: unknown (a study keeps its own profile)
        dataset = load_dataset(data or (stored or {}).get("data") or "basicmotions")
        sha = fingerprint(dataset)
        given = {"target": target, "sampler": sampler, "seed": seed, "space": space, "limits": limits,
                 "study": name, "data": dataset.source or data, "profiles": profiles, "targets_file": targets_file}
        settings = _settings(stored, given, sha if (data is not None or stored is None) else None)
        if stored is not None and data is None and sha != stored["data_sha256"]:
            raise DataError(f"the study's data '{stored['data']}' differs here from the data it was run on; pass that "
                            "data with --data")
        search = Search(settings, dataset, out, progress, name)
        out.mkdir(parents=True, exist_ok=True)
        st = st or open_storage(url)
        if not existing:
            try:
                s = optuna.create_study(study_name=name, storage=st, directions=[d for _, d, _ in OBJECTIVES])
                s.set_user_attr(STUDY_ATTR, settings)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    s.set_metric_names([k for k, *_ in OBJECTIVES])
            except optuna.exceptions.DuplicatedStudyError:   # another machine made it a moment ago: join it
                settings = _settings(_stored(st, name, url), given, sha)
                search = Search(settings, dataset, out, progress, name)
        v = search.validation()
        if trials:
            _say(search, f"tune: {trials} trial(s) on {min(jobs, trials)} worker(s), study '{printable(name)}' in {printable(redact(url))} "
                         f"({settings['sampler']}, seed {settings['seed']}, target {settings['target']}); validation: "
                         f"{v['validation_sequences']} of the {len(dataset.train)} training sequences "
                         f"({v['held_out']}); the test split waits for the chosen model")
        t0 = time.perf_counter()
        resume = (f"edgeseq tune --out {out} --study {name}" + (f" --storage {redact(url)}" if storage else ""))
        try:
            if trials:
                _workers(search, url, st, name, trials, jobs)
        except KeyboardInterrupt:
            done = sum(t.state.name == "COMPLETE" for t in optuna.load_study(study_name=name, storage=st).trials)
            raise TuneInterrupted(f"stopped: {done} finished trial(s) are kept in {redact(url)}; add trials with "
                                  f"`{resume} --trials N`, or write the front of those with "
                                  f"`{resume} --trials 0`") from None
        seconds = time.perf_counter() - t0
        all_trials = optuna.load_study(study_name=name, storage=st).get_trials(deepcopy=False)
        result = summarize(all_trials, search, name, redact(url), trials, seconds)
        result["validation"] = v
        write_pages(result, out)
        if result["chosen"] is not None:
            try:
                result["chosen"].update(retrain(search, result["chosen"]))
            except KeyboardInterrupt:
                raise TuneInterrupted(f"stopped while retraining the chosen model; the trials are kept: write the "
                                      f"front and retrain it with `{resume} --trials 0`") from None
            write_pages(result, out)
        return result
    finally:
        close_storage(st)
        optuna.logging.set_verbosity(verbosity)


def _check_out_is_this_studys(out: Path, name: str, url: str) -> None:
    """UsageError where `out` holds the front and model of another study (or storage): a run
    writes its own over them, so another study takes its own --out."""
    try:
        prev = json.loads((out / "pareto.json").read_text())
        prev = (str(prev["study"]), str(prev["storage"])) if isinstance(prev, dict) else None
    except (OSError, ValueError, KeyError):
        return                                              # none, or not one tune wrote: nothing of a study's
    default = [u.startswith("sqlite:///") and u.endswith("/study.db") for u in (prev[1], url)] if prev else []
    if prev is not None and prev[0] == name and prev[1] != url and not all(default):
        raise UsageError(f"--out '{out}' holds the front and chosen model of study '{name}' in {prev[1]}, not in "
                         f"{url}; resume it with --storage {prev[1]} (or without --storage where it is this folder's "
                         "study.db), or give the study in this storage its own --out")
    if prev is not None and prev[0] != name:                 # a moved --out keeps its study.db
        raise UsageError(f"--out '{out}' holds the front and chosen model of study '{prev[0]}' in {prev[1]}; give "
                         f"study '{name}' its own --out (or pass --study {prev[0]} to add trials to that one)")


# --- the chosen model ------------------------------------------------------------------------

def retrain(search: Search, chosen: dict) -> dict:
    """Retrain the chosen trial's settings on the whole training split; save its checkpoint, float
    and int8 exports to out/model and score them on the test split on both protocols, beside
    1-NN DTW on the same split (`test["baseline"]`)."""
    from dataclasses import replace

    from edgeseq.runtime.statefile import write_files
    from edgeseq.train import DEFAULTS, save_checkpoint, train
    from edgeseq.train.baseline import scored_or_why
    from export import export_int8, export_model

    arch, settings, schedule = chosen["arch"], chosen["settings"], chosen["schedule"]
    full = search.full
    model = search.out / "model"
    kept = _kept(model, search, chosen)
    if kept is not None:
        _say(search, f"trial {chosen['trial']} is still the chosen one: {printable(model)} keeps its model and test scores")
        return kept
    _say(search, f"retraining trial {chosen['trial']} ({describe(arch, settings, schedule)}) on all "
                 f"{len(full.train)} training sequences; then the test split, once")
    tc = replace(DEFAULTS[arch], seed=search.settings["seed"], gain_stage=False, **schedule)
    ckpt = train(arch, full, tc, settings, progress=False)
    save_checkpoint(ckpt, model)
    f = export_model(ckpt, model / "model.onnx")
    q = export_int8(ckpt, model / "model-int8.onnx", "static", data=full, keep_anyway=True)
    int8 = int8_figures(str(model / "model-int8.onnx"), full.test, full, search.target)
    from edgeseq.runtime.evaluate import evaluate
    ev = evaluate(str(model / "model.onnx"), full.test, full.labels, features=full.features)
    test = {"int8": {k: int8[k] for k in ("per_sequence_accuracy", "never_reset_accuracy")},
            "float": {"per_sequence_accuracy": ev["accuracy"],
                      "never_reset_accuracy": ev["continuous"]["reading_accuracy"]},
            "sequences": len(full.test), "baseline": scored_or_why(full.train, full.test, seed=search.settings["seed"])}
    firmware = {k: int8[k] for k in ("latency_us", "flash_kb", "ram_kb", "cost_source", "fits_part")}
    r = {"test": test, "firmware": firmware, "int8_within_bounds": q["within_bounds"],
         "over_limits": over_limits(firmware, search.caps()),
         "files": {"checkpoint": str(model / "checkpoint.pt"), "float": f["path"], "int8": q["path"]}}
    write_files({model / "scores.json": (json.dumps({"study": search.study, "trial": chosen["trial"], "arch": arch,
                                                      "settings": settings, "schedule": schedule, **r},
                                                     indent=2) + "\n").encode()})
    return r


def _kept(model: Path, search: Search, chosen: dict) -> dict | None:
    """What out/model/scores.json says, if it is this study's chosen trial and its files are all there
    (a resumed study whose choice did not change): the model is not trained again."""
    try:
        s = json.loads((model / "scores.json").read_text(encoding="utf-8"))
        files = {"checkpoint": model / "checkpoint.pt", "float": model / "model.onnx",
                 "int8": model / "model-int8.onnx"}
        if s["study"] != search.study or s["trial"] != chosen["trial"] or not all(f.exists() for f in files.values()):
            return None
        return {**{k: s[k] for k in ("test", "firmware", "int8_within_bounds", "over_limits")},
                "files": {k: str(f) for k, f in files.items()}}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None

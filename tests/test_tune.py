"""`edgeseq tune`: a tiny real search (the quick space: RNN/GRU of 4-8 units, 1-2 epochs) on data
with groups; the files it writes, a non-dominated front, limits that exclude every trial,
resuming a study (on two workers), a part from a targets file (on two workers, kept by the
study), validation carved by group from the training split only, seeded parameters (each
worker its own, one worker reproducible), and runs that open one new SQLite file at once."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("optuna", reason="optuna not installed: pip install '.[tune]'")

from edgeseq.cli import cli  # noqa: E402
from edgeseq.errors import UsageError  # noqa: E402
from edgeseq.tune import OBJECTIVES, QUICK_SPACE, check_space, make_sampler, suggest, tune  # noqa: E402
from edgeseq.tune.pages import dominates, front  # noqa: E402
from helpers import one_error_line  # noqa: E402


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """BasicMotions with 10 training groups (one sequence of each class apiece) and a test split
    of its own 4 groups, named apart: t0..t3 may never reach a trial."""
    d = np.load(Path(__file__).resolve().parents[1] / "edgeseq" / "data" / "basicmotions.npz")
    path = tmp_path_factory.mktemp("data") / "grouped.npz"
    np.savez(path, X=d["X_train"], y=d["y_train"], groups=np.array([f"g{i % 10}" for i in range(40)]),
             X_test=d["X_test"], y_test=d["y_test"], groups_test=np.array([f"t{i % 4}" for i in range(40)]),
             labels=d["labels"], features=d["features"])
    return path


@pytest.fixture(scope="module")
def tuned(grouped, tmp_path_factory):
    """3 trials and the chosen model, every split the scoring saw recorded."""
    import importlib
    ev = importlib.import_module("edgeseq.runtime.evaluate")     # the module (edgeseq.runtime exports a function of its name)
    work = tmp_path_factory.mktemp("tune")
    seen = []
    real = ev.evaluate

    def spy(model, split, *args, **kwargs):
        seen.append((len(split), sorted(set(split.groups.tolist())), split.X.copy()))
        return real(model, split, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ev, "evaluate", spy)
        mp.chdir(work)
        r = tune("a", data=str(grouped), trials=3, seed=0, space=QUICK_SPACE, progress=False)
    return r, work, seen


def test_files_are_written_in_out_only(tuned):
    r, work, _ = tuned
    assert sorted(p.name for p in work.iterdir()) == ["a"]            # nothing beside --out
    out = work / "a"
    names = {p.name for p in out.iterdir()}
    assert names == {"study.db", "pareto.json", "pareto.csv", "pareto.png", "pareto.html", "model"}, names
    assert {p.name for p in (out / "model").iterdir()} == {"checkpoint.pt", "metrics.json", "training_curve.png",
                                                            "model.onnx", "model-int8.onnx", "scores.json"}
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="pareto.png"' in (out / "pareto.html").read_text()
    saved = json.loads((out / "pareto.json").read_text())
    assert saved["chosen"]["trial"] == r["chosen"]["trial"] and "test" in saved["chosen"]
    rows = (out / "pareto.csv").read_text().splitlines()
    assert rows[0].startswith("trial,arch,settings") and len(rows) == 1 + len(r["front"])
    scores = json.loads((out / "model" / "scores.json").read_text())
    assert scores["test"]["sequences"] == 40 and 0 <= scores["test"]["int8"]["never_reset_accuracy"] <= 1
    b = scores["test"]["baseline"]                       # 1-NN DTW on the chosen model's test split
    assert b["method"] == "1-NN DTW" and b["queries"] == 40 and 0 <= b["accuracy"] <= 1


def test_front_is_non_dominated_and_chosen_is_its_best(tuned):
    r, _, _ = tuned
    assert r["trials"]["finished"] == 3 and r["front"]
    feasible = [t for t in r["all_trials"] if t["feasible"]]
    on = {t["trial"] for t in r["front"]}
    for a in r["front"]:
        assert not any(dominates(b, a) for b in feasible)
    for t in feasible:
        if t["trial"] not in on:
            assert any(dominates(b, t) for b in r["front"])
    best = max(r["front"], key=lambda t: (t["never_reset_accuracy"], -t["latency_us"]))
    assert r["chosen"]["trial"] == best["trial"]
    assert set(r["chosen"]["firmware"]) >= {"latency_us", "flash_kb", "ram_kb"}


def test_validation_is_whole_training_groups_never_the_test_split(tuned, grouped):
    r, _, seen = tuned
    v = r["validation"]
    val, fit = set(v["groups"]["validation"]), set(v["groups"]["training"])
    assert val and fit and not val & fit and val | fit == {f"g{i}" for i in range(10)}
    assert v["validation_sequences"] + v["training_sequences"] == 40 and v["validation_sequences"] == 4 * len(val)
    X_train = np.load(grouped)["X"]
    trials, final = seen[:3], seen[3:]
    for n, groups, X in trials:                                   # each trial: the validation split, only
        assert n == v["validation_sequences"] and set(groups) == val
        assert np.array_equal(X, X_train[v["validation_index"]])
    assert final and all(n == 40 and groups == ["t0", "t1", "t2", "t3"] for n, groups, _ in final)   # the chosen model


def test_limits_nothing_meets_is_one_error_and_no_model(tuned, grouped, runner):
    r, _, _ = tuned
    res = runner.invoke(cli, ["tune", "--data", str(grouped), "--quick", "--trials", "2", "--max-flash-kb", "1",
                              "--out", "b", "--quiet"])
    line = one_error_line(res, 1)
    assert "none of the 2 finished trials meets --max-flash-kb 1 on nrf52840" in line and "nothing was chosen" in line
    saved = json.loads(Path("b/pareto.json").read_text())
    assert saved["chosen"] is None and saved["front"] == [] and not Path("b/model").exists()
    assert all(t["over"] and not t["feasible"] for t in saved["all_trials"])
    # over the limit before training: not trained, no accuracy claimed
    assert all(t["trained"] is False and t["never_reset_accuracy"] is None and "train_seconds" not in t
               for t in saved["all_trials"])
    # seeded: the same seed draws the same parameters (here, whatever the limits)
    params = [(t["arch"], t["settings"], t["schedule"]) for t in saved["all_trials"]]
    assert params == [(t["arch"], t["settings"], t["schedule"]) for t in r["all_trials"][:2]]


def test_resume_adds_trials_on_two_workers(tuned, runner, tmp_path):
    _, work, _ = tuned
    shutil.copytree(work / "a", "c")
    res = runner.invoke(cli, ["tune", "--out", "c", "--trials", "1"])
    assert "already holds study 'tune': pass --study tune to add trials" in one_error_line(res, 2)
    res = runner.invoke(cli, ["tune", "--out", "c", "--study", "tune", "--seed", "5", "--trials", "1"])
    assert "study 'tune' was run with --seed 0" in one_error_line(res, 2)
    res = runner.invoke(cli, ["tune", "--out", "c", "--study", "tune", "--trials", "2", "--jobs", "2", "--quiet",
                              "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["trials"]["this_run"] == 2 and [t["trial"] for t in r["all_trials"]] == [0, 1, 2, 3, 4]
    assert r["space"] == QUICK_SPACE and r["chosen"] is not None          # the study's settings, kept
    # another study (or one in another storage) in the same --out would write over this one's front and model
    before = {p.name: p.read_bytes() for p in Path("c").iterdir() if p.is_file()}
    for other in (["--study", "s2"], ["--study", "tune", "--storage", "sqlite:///elsewhere.db"]):
        res = runner.invoke(cli, ["tune", "--out", "c", *other, "--quick", "--trials", "1"])
        assert ("--out 'c' holds the front and chosen model of study 'tune' in sqlite:///" in one_error_line(res, 2)
                and "its own --out" in res.output)
    assert before == {p.name: p.read_bytes() for p in Path("c").iterdir() if p.is_file()}
    assert not Path("elsewhere.db").exists()
    # a moved --out keeps its study: resumed from its new place
    shutil.move("c", "moved")
    res = runner.invoke(cli, ["tune", "--out", "moved", "--study", "tune", "--trials", "0", "--quiet"])
    assert res.exit_code == 0, res.output
    b = json.loads(Path("moved/model/scores.json").read_text())["test"]["baseline"]
    assert f"baseline: 1-NN DTW (dependent, all channels) on the same split: {b['accuracy']:.3f} per sequence" \
        in res.stdout
    te = json.loads(Path("moved/model/scores.json").read_text())["test"]
    under = [k for k in ("int8", "float") if te[k]["per_sequence_accuracy"] < b["accuracy"] - 1e-9]
    assert ("below the nearest-neighbour baseline" in res.stderr) == bool(under)


MYPART = {"name": "mypart", "part": "My board", "core": "Cortex-M4", "clock_mhz": 16, "flash_kb": 1, "sram_kb": 16,
          "cycles_per_mac": 2.0, "cycles_per_op": 4.0, "source": "my datasheet"}


def test_a_part_of_a_targets_file_reaches_every_worker_and_stays_with_the_study(grouped, runner):
    """A part of one's own (`--targets-file`, flash too small for any model, so no trial is
    chosen and nothing is retrained): both workers plan on it, the study keeps its profile, a
    resumed run needs no file, one whose file only words the part otherwise goes on, and one whose
    file gives the part other figures is refused."""
    import optuna
    Path("parts.json").write_text(json.dumps([MYPART]))
    res = runner.invoke(cli, ["tune", "--data", str(grouped), "--quick", "--trials", "2", "--jobs", "2", "--quiet",
                              "--target", "mypart", "--targets-file", "parts.json", "--out", "m"])
    line = one_error_line(res, 1)
    assert "none of the 2 finished trials meets the part on mypart (16 KB RAM, 1 KB flash)" in line, line
    saved = json.loads(Path("m/pareto.json").read_text())
    assert saved["target"] == {k: MYPART[k] for k in ("name", "part", "core", "clock_mhz", "flash_kb", "sram_kb")}
    assert [t["state"] for t in saved["all_trials"]] == ["complete", "complete"]      # the second on the other worker
    assert all(any(o.startswith("flash") and o.endswith("> 1 KB") for o in t["over"]) for t in saved["all_trials"])
    kept = optuna.load_study(study_name="tune", storage=f"sqlite:///{Path('m/study.db').resolve()}").user_attrs
    assert kept["edgeseq_tune"]["target_profile"] == {**MYPART, "note": "", "xip_cache_kb": 0}
    for args in ([], ["--target", "mypart"]):                   # the study's own profile: no file needed
        res = runner.invoke(cli, ["tune", "--out", "m", "--study", "tune", "--trials", "0", *args])
        assert "meets the part on mypart (16 KB RAM, 1 KB flash)" in one_error_line(res, 1)
    Path("parts.json").write_text(json.dumps({**MYPART, "part": "My board, rev B", "source": "datasheet v2",
                                              "note": "new text"}))           # one profile alone, text changed
    res = runner.invoke(cli, ["tune", "--out", "m", "--study", "tune", "--trials", "0", "--targets-file", "parts.json"])
    assert "meets the part on mypart (16 KB RAM, 1 KB flash)" in one_error_line(res, 1)
    Path("parts.json").write_text(json.dumps([{**MYPART, "sram_kb": 32}]))
    res = runner.invoke(cli, ["tune", "--out", "m", "--study", "tune", "--trials", "0", "--targets-file", "parts.json"])
    assert ("study 'tune' was run on target 'mypart' with sram_kb 16, which parts.json now gives as 32; resume it "
            "with the profile it was run with") in one_error_line(res, 2)
    res = runner.invoke(cli, ["tune", "--out", "m", "--study", "tune", "--trials", "0", "--target", "nrf52840"])
    assert "study 'tune' was run with --target mypart" in one_error_line(res, 2)


@pytest.mark.parametrize("args, code, message", [
    (["--out", "f.txt"], 2, "--out 'f.txt' is a file"),
    (["--out", "n", "--trials", "0"], 2, "--trials 0 writes the front of an existing study"),
    (["--out", "n", "--storage", "nosuch://x"], 2, "--storage 'nosuch://x' is not a storage Optuna can open"),
    (["--out", "n", "--study", "a b"], 2, "--study 'a b' must be"),
    (["--out", "n", "--target", "nope"], 2, "unknown target 'nope'"),
    (["--out", "n", "--target", "mypart"], 2, "unknown target 'mypart'"),
    (["--out", "n", "--targets-file", "nrf.json"], 1, "entry 1: name 'nrf52840' is already a built-in target"),
    (["--out", "n", "--targets-file", "none.json"], 1, "targets file 'none.json' not found"),
    (["--out", "n", "--targets-file", "nrf1.json"], 1, "entry 1: name 'NRF52840' is already a built-in target (as "
                                                        "'nrf52840'"),
    (["--out", "n", "--target", "mypart", "--targets-file", "other.json"], 2,
     "unknown target 'mypart'; built in: esp32s3, nrf52840, rp2040, stm32f446, stm32h743; from 'other.json': "
     "otherpart (check the names in the file"),
    (["--out", "n", "--max-ram-kb", "-1"], 2, "-1 is not > 0"),
    (["--out", "n", "--jobs", "0"], 2, "--jobs"),
    (["--out", "n", "--storage", "sqlite://"], 2, "--storage sqlite:// is a database in memory"),
    (["--out", "n", "--storage", "sqlite:///:memory:"], 2, "is a database in memory"),
])
def test_bad_options_are_one_line_and_write_nothing(runner, args, code, message):
    Path("f.txt").write_text("x")
    Path("nrf.json").write_text(json.dumps([{**MYPART, "name": "nrf52840"}]))
    Path("nrf1.json").write_text(json.dumps({**MYPART, "name": "NRF52840"}))
    Path("other.json").write_text(json.dumps([{**MYPART, "name": "otherpart"}]))
    res = runner.invoke(cli, ["tune", *args])
    assert message in one_error_line(res, code)
    assert not Path("n").exists()


def test_front_of_random_points_is_exactly_the_undominated():
    rng = np.random.default_rng(0)
    rows = [dict(zip([k for k, *_ in OBJECTIVES], rng.integers(0, 4, len(OBJECTIVES)).tolist()), trial=i,
                 feasible=bool(rng.random() < 0.8)) for i in range(60)]
    got = {r["trial"] for r in front(rows)}
    want = {a["trial"] for a in rows if a["feasible"] and not any(dominates(b, a) for b in rows if b["feasible"])}
    assert got == want and all(rows[i]["feasible"] for i in got)


def test_space_and_seeds():
    with pytest.raises(UsageError, match="search space entry depth is unknown"):
        check_space({"arch": ["gru"], "depth": [1]})
    with pytest.raises(UsageError, match="'arch' must list distinct streaming architectures"):
        check_space({"arch": ["bigru"]})
    with pytest.raises(UsageError, match="'window' must be at least 1"):
        check_space({"arch": ["transformer"], "window": [0]})


@pytest.mark.parametrize("sampler", ["nsga2", "tpe"])
def test_workers_started_together_draw_apart_and_one_worker_reproduces(sampler, tmp_path):
    """Two commands that start together on one new study (both see no trial yet) each build the
    sampler from the study's seed, as `run_trials` does: their first trials differ. One worker on a
    new study draws the same trials for a seed, and a resumed one goes on as an unbroken run would.
    The ask path only, no training; the shared study in SQLite, as `--storage` gives it."""
    import optuna

    from edgeseq.tune.storage import close_storage, open_storage

    def study(storage):
        if not optuna.get_all_study_names(storage):
            optuna.create_study(study_name="s", storage=storage, directions=[d for _, d, _ in OBJECTIVES])
        return optuna.load_study(study_name="s", storage=storage, sampler=make_sampler(sampler, 0))

    def draw(s):
        t = s.ask()
        return t, (t.number, suggest(t, QUICK_SPACE))

    def finish(s, t):
        t.set_user_attr("constraints", [-1.0, -1.0, -1.0])
        s.tell(t, [0.5, 0.5, 100.0 + t.number, 1.0, 1.0])

    def run(storage, trials):
        s, drawn = study(storage), []
        for _ in range(trials):
            t, d = draw(s)
            drawn.append(d)
            finish(s, t)
        return drawn

    shared = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    try:
        a, b = study(shared), study(shared)                              # two workers, a sampler each
        (ta, first_a), (tb, first_b) = draw(a), draw(b)
        finish(a, ta), finish(b, tb)
    finally:
        close_storage(shared)
    assert first_a[1] != first_b[1], (first_a, first_b)
    one = run(optuna.storages.InMemoryStorage(), 4)
    assert one == run(optuna.storages.InMemoryStorage(), 4)                 # the same seed, the same trials
    # a trial drawn at random (NSGA-II's first generation, TPE's start-up) draws by its number alone
    assert sorted([first_a, first_b], key=lambda d: d[0]) == one[:2]
    resumed = optuna.storages.InMemoryStorage()                              # 2 trials, then 2 more in a new worker
    assert run(resumed, 2) + run(resumed, 2) == one


def test_runs_that_start_together_on_a_new_sqlite_file_both_open_it(tmp_path, monkeypatch):
    """Two runs that make Optuna's tables in one new SQLite file at once: the later finds them made
    ("table studies already exists") and opens the storage, as on PostgreSQL."""
    import sqlite3

    import optuna
    import sqlalchemy.exc

    from edgeseq.tune.storage import close_storage, open_storage

    real, calls = optuna.storages.RDBStorage, []

    def other_run_first(url, **kwargs):
        calls.append(url)
        if len(calls) == 1:                     # the other run made the tables while this one made them
            close_storage(real(url))
            raise sqlalchemy.exc.OperationalError("CREATE TABLE studies", None,
                                                  sqlite3.OperationalError("table studies already exists"))
        return real(url, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", other_run_first)
    storage = open_storage(f"sqlite:///{tmp_path / 'new.db'}")
    monkeypatch.undo()
    try:
        assert len(calls) == 2 and optuna.get_all_study_names(storage) == []
    finally:
        close_storage(storage)


def test_a_window_the_data_gave_a_trial_is_the_retrained_models(tmp_path, monkeypatch):
    """A space without `window`, positions none: each trial's Transformer takes `window_for` its
    fit split, whose median length differs here from the whole training split's; the chosen
    trial's window is kept with its settings and the model retrained on the whole split has the
    same. With ALiBi (the default) both keep the default window."""
    from edgeseq.data import load_dataset
    from edgeseq.models.transformer import WINDOW, window_for
    from edgeseq.train import load_checkpoint
    from edgeseq.tune import validation_mask

    rng = np.random.default_rng(0)
    n, T, F = 40, 30, 2
    lengths = np.array([6 + 2 * (i % 10) for i in range(n)])            # group g{i % 10}: its own length
    X = rng.standard_normal((n, T, F)).astype(np.float32)
    y = np.arange(n) % 2
    X[y == 1] += 1.5
    path = tmp_path / "short.npz"
    np.savez(path, X=X, y=y, lengths=lengths, groups=np.array([f"g{i % 10}" for i in range(n)]), X_test=X[:8],
             y_test=y[:8], lengths_test=lengths[:8])
    train = load_dataset(str(path)).train
    mask = validation_mask(train)
    fit, full = window_for(train.lengths[~mask]), window_for(train.lengths)
    assert fit != full                                                   # the case this test is about
    monkeypatch.chdir(tmp_path)
    space = {"arch": ["transformer"], "d_model": [8], "layers": [1], "lr": {"low": 5e-3, "high": 1e-2},
             "epochs": {"low": 1, "high": 1}, "positions": ["none"]}
    r = tune("w", data=str(path), trials=1, seed=0, space=space, progress=False)
    assert r["chosen"] is not None and r["chosen"]["settings"]["window"] == fit
    assert load_checkpoint(r["chosen"]["files"]["checkpoint"])["config"]["window"] == fit
    del space["positions"]
    r = tune("a", data=str(path), trials=1, seed=0, space=space, progress=False)
    ckpt = load_checkpoint(r["chosen"]["files"]["checkpoint"])
    assert r["chosen"]["settings"]["window"] == ckpt["config"]["window"] == WINDOW != fit
    assert ckpt["config"]["positions"] == "alibi"


@pytest.mark.parametrize("arch, settings", [
    ("rnn", {"hidden": 8}), ("gru", {"hidden": 8, "layers": 2}), ("lstm", {"hidden": 8}),
    ("ssm", {"d_model": 8, "d_state": 4, "layers": 1, "selective": True}),
    ("transformer", {"d_model": 8, "layers": 1, "heads": 2, "window": 6})])
def test_untrained_firmware_figures_are_the_trained_models(arch, settings, tmp_path):
    """What lets tune skip training a trial over a limit: latency, flash and RAM on the target
    follow the architecture and its sizes, not what the weights learnt."""
    from dataclasses import replace
    from types import SimpleNamespace

    from edgeseq.data import load_dataset
    from edgeseq.train import DEFAULTS, train
    from edgeseq.tune.figures import firmware_figures, untrained_figures
    from export import export_int8
    from firmware_sim.targets import get_target

    ds = load_dataset("basicmotions")
    search = SimpleNamespace(data=ds, out=tmp_path, target=get_target("nrf52840"))
    tc = replace(DEFAULTS[arch], epochs=3, seed=0)
    before = untrained_figures(arch, settings, tc, search)
    path = tmp_path / "trained.onnx"
    export_int8(train(arch, ds, tc, settings, progress=False), path, "static", data=ds, keep_anyway=True)
    after = firmware_figures(str(path), search.target)
    assert before == after and after["latency_us"] > 0
    assert list(tmp_path.iterdir()) == [path]                  # the untrained model's files are gone

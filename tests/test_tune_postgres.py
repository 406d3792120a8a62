"""`edgeseq tune` over PostgreSQL, Optuna's distributed mode, against a real server started here
(initdb into a temp dir, 127.0.0.1 on a free port, sockets in that dir, trust auth): two workers
finish one study; another run joins it as a second machine would (and fails a trial whose
machine was lost); a run joins a study made meanwhile; a bad URL is one line that says what to
do; the password never shows. Without PostgreSQL's server or psycopg2 these tests skip and say
why (`make test` installs PostgreSQL as root with apt)."""

import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("optuna", reason="optuna not installed: pip install '.[tune]'")

from edgeseq.cli import cli  # noqa: E402
from edgeseq.gateway.broker import free_port  # noqa: E402
from edgeseq.tune import QUICK_SPACE  # noqa: E402
from edgeseq.tune.storage import close_storage, open_storage  # noqa: E402
from helpers import one_error_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "pw-s3cret"           # trust auth ignores it: it is here to be hidden
INSTALL = "apt-get install postgresql, or `make services` as root"


def _bindir():
    """The folder of initdb and postgres: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    if shutil.which("initdb") and shutil.which("postgres"):
        return Path(shutil.which("initdb")).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


class Server:
    """A throwaway PostgreSQL cluster in its own temp dir. The server refuses to run as root, so as
    root the cluster belongs to the `postgres` user (Debian's package makes it), else `nobody`."""

    def __init__(self, bindir: Path, root: Path):
        self.bindir, self.root, self.port, self.proc = bindir, root, free_port(), None
        self.user = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    self.user = pwd.getpwnam(name)
                    break
                except KeyError:
                    pass
            if self.user is None:
                pytest.skip("PostgreSQL will not run as root and there is no 'postgres' or 'nobody' user to run it")
            os.chown(root, self.user.pw_uid, self.user.pw_gid)
        self.data, self.log = root / "data", root / "postgres.log"

    def _as_owner(self):
        return {} if self.user is None else {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def start(self):
        subprocess.run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "edgeseq", "--auth=trust",
                        "--no-sync", "--no-locale", "-E", "UTF8"], check=True, capture_output=True, cwd=self.root,
                       **self._as_owner())
        log = open(self.log, "ab")
        self.proc = subprocess.Popen([str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                                      "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
                                      "-c", "fsync=off", "-c", "full_page_writes=off"],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=self.root, **self._as_owner())
        log.close()
        import psycopg2
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="edgeseq", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    log = self.log.read_text()[-2000:]
                    raise AssertionError(f"PostgreSQL did not listen on {self.port}: {log}") from None
                time.sleep(0.1)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE tune")
        conn.close()
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)            # fast shutdown: open connections are closed
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def url(self, db="tune", port=None):
        return f"postgresql://edgeseq:{PASSWORD}@127.0.0.1:{port or self.port}/{db}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    bindir = _bindir()
    if bindir is None:
        pytest.skip(f"PostgreSQL not installed ({INSTALL})")
    pytest.importorskip("psycopg2", reason="psycopg2 not installed (pip install psycopg2-binary)")
    # As root the cluster's owner must reach its folder: pytest's own temp dirs are private to root.
    root = Path(tempfile.mkdtemp(prefix="edgeseq-pg-")) if os.geteuid() == 0 else tmp_path_factory.mktemp("pg")
    s = Server(bindir, root)
    try:
        yield s.start()
    finally:
        s.stop()
        if os.geteuid() == 0:
            shutil.rmtree(root, ignore_errors=True)


def _tune(*args, cwd):
    """`edgeseq tune` in its own process: stdout and stderr, the workers' progress lines included."""
    p = subprocess.run([sys.executable, "-m", "edgeseq", "tune", *map(str, args)], capture_output=True, text=True,
                       cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def first(server, tmp_path_factory):
    """2 trials of a new study on 2 workers (`--jobs 2`) over PostgreSQL."""
    work = tmp_path_factory.mktemp("machine-a")
    code, out, err = _tune("--storage", server.url(), "--study", "gestures", "--quick", "--trials", 2, "--jobs", 2,
                           "--out", "a", "--json", cwd=work)
    assert code == 0, err[-3000:]
    return json.loads(out), err, work


def test_two_workers_finish_one_study_and_write_the_front(first, server):
    r, err, work = first
    assert r["trials"]["finished"] + r["trials"]["failed"] == 2 and r["trials"]["this_run"] == 2
    assert sorted(t["trial"] for t in r["all_trials"]) == [0, 1]
    assert sum(line.startswith("trial ") for line in err.splitlines()) == 2       # one line from each worker
    assert "Warning" not in err and "Traceback" not in err
    assert r["storage"] == f"postgresql://edgeseq:***@127.0.0.1:{server.port}/tune"
    out = work / "a"
    assert {p.name for p in out.iterdir()} >= {"pareto.json", "pareto.csv", "pareto.png", "pareto.html", "model"}
    assert not (out / "study.db").exists()                                         # the study is in PostgreSQL
    saved = json.loads((out / "pareto.json").read_text())
    assert saved["front"] and saved["chosen"]["trial"] in {t["trial"] for t in saved["front"]}


def test_another_machine_joins_the_study_and_adds_trials(first, server, runner, monkeypatch):
    import optuna
    import sqlalchemy
    import subprocess as sp
    # A machine that died inside a trial: running, its heartbeat an hour old.
    storage = open_storage(server.url())
    lost = optuna.load_study(study_name="gestures", storage=storage).ask()
    storage.record_heartbeat(lost._trial_id)
    with storage.engine.begin() as c:
        c.execute(sqlalchemy.text("UPDATE trial_heartbeats SET heartbeat = heartbeat - interval '1 hour'"))
    close_storage(storage)
    argv = []
    real = sp.Popen

    def spy(args, *a, **kw):
        argv.append(" ".join(map(str, args)))
        return real(args, *a, **kw)

    monkeypatch.setattr(sp, "Popen", spy)
    res = runner.invoke(cli, ["tune", "--storage", server.url(), "--study", "gestures", "--trials", "2", "--jobs", "2",
                              "--out", "b", "--json", "--quiet"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["trials"]["this_run"] == 2 and [t["trial"] for t in r["all_trials"]] == [0, 1, 2, 3, 4]
    assert r["all_trials"][2]["state"] == "fail"                      # the lost trial, failed by the next to start
    assert r["space"] == QUICK_SPACE                                  # the study's settings, not this run's
    assert len(argv) == 1 and PASSWORD not in argv[0]                 # a worker's command line is public (ps)


def test_a_study_another_machine_made_a_moment_ago_is_joined(first, server, runner, monkeypatch):
    import optuna
    monkeypatch.setattr(optuna, "get_all_study_names", lambda storage: [])   # it was not there when looked for
    res = runner.invoke(cli, ["tune", "--storage", server.url(), "--study", "gestures", "--trials", "1", "--out", "c",
                              "--json", "--quiet"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["trials"]["this_run"] == 1 and len(r["all_trials"]) == 6 and r["space"] == QUICK_SPACE


@pytest.mark.parametrize("where, message", [
    ("port", "cannot reach the PostgreSQL server at 127.0.0.1:{port}"),
    ("database", "has no database 'nosuch'"),
])
def test_a_bad_url_is_one_line_that_says_what_to_do(server, runner, where, message):
    port = free_port() if where == "port" else server.port
    url = server.url("nosuch" if where == "database" else "tune", port=port)
    res = runner.invoke(cli, ["tune", "--storage", url, "--study", "gestures", "--trials", "1", "--out", "n"])
    line = one_error_line(res, 2)
    assert message.format(port=port) in line and PASSWORD not in res.output and "***" in line
    assert not Path("n").exists()


def test_a_missing_driver_says_what_to_install(runner):
    try:
        import pg8000  # noqa: F401
        pytest.skip("pg8000 is installed: no missing driver to name")
    except ModuleNotFoundError:
        pass
    res = runner.invoke(cli, ["tune", "--storage", f"postgresql+pg8000://me:{PASSWORD}@127.0.0.1:1/tune", "--out", "n"])
    line = one_error_line(res, 2)
    assert "needs the Python module pg8000; pip install pg8000" in line and PASSWORD not in res.output


def test_the_password_is_never_printed_nor_written(first, server):
    r, err, work = first
    assert PASSWORD not in err and PASSWORD not in json.dumps(r)
    for p in (work / "a").rglob("*"):
        if p.is_file():
            assert PASSWORD.encode() not in p.read_bytes(), p

"""The Optuna storage of an `edgeseq tune` study: a SQLite file on one machine, or a database
server (PostgreSQL) that workers on several machines share.

`open_storage` turns a URL into Optuna's `RDBStorage` or a `UsageError` that says what to do
(start the server, create the database, install the driver); `redact` hides a password
wherever a URL is shown. Every storage beats a heartbeat from its running trial: a worker that
dies inside a trial (a machine lost, a process killed) leaves it running, and the next worker to
start a trial records it as failed instead.
"""

from __future__ import annotations

import importlib.util
import re
import time
import warnings

from edgeseq.errors import EdgeseqError, UsageError

HEARTBEAT_S = 60             # a running trial's worker writes this often...
GRACE_S = 600                # ...and a trial silent this long has lost its worker
CONNECT_TIMEOUT_S = 10       # a server that does not answer: an error, not a wait of minutes
# SQLAlchemy's own driver for a bare postgresql:// differs by release (psycopg2; psycopg from 2.1):
# the one installed is used, and each names its pip package.
PG_DRIVERS = (("psycopg2", "psycopg2-binary"), ("psycopg", '"psycopg[binary]"'))


def _optuna():
    try:
        import optuna
    except ModuleNotFoundError:
        raise EdgeseqError("edgeseq tune needs optuna: pip install '.[tune]' in edgeseq's clone") from None
    return optuna


def redact(url: str) -> str:
    """A storage URL with its password hidden (after the user, or as a `password=` parameter)."""
    url = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url, flags=re.IGNORECASE)


def _postgres(url: str) -> tuple[str, bool]:
    """`url` with the PostgreSQL driver that is installed, when it names none; and whether it is PostgreSQL."""
    m = re.match(r"postgres(?:ql)?(\+\w+)?://", url)
    if m is None:
        return url, False
    if m.group(1) is None:
        for module, _ in PG_DRIVERS:
            if importlib.util.find_spec(module) is not None:
                return f"postgresql+{module}://{url[m.end():]}", True
    return url, True


def _unreachable(error: str) -> str | None:
    """What to do about a PostgreSQL server that refused the connection, from libpq's message."""
    where = re.search(r'server at "([^"]+)"(?: \([^)]*\))?, port (\d+)', error)
    host = re.search(r'host name "([^"]+)"', error)
    server = f"{where.group(1)}:{where.group(2)}" if where else f"'{host.group(1)}'" if host else "the storage's host"
    if m := re.search(r'database "([^"]+)" does not exist', error):
        return f"the PostgreSQL server at {server} has no database '{m.group(1)}'; create it (createdb {m.group(1)}) " \
               "or name another in the URL"
    if m := re.search(r'role "([^"]+)" does not exist|password authentication failed for user "([^"]+)"', error):
        return f"the PostgreSQL server at {server} refused user '{m.group(1) or m.group(2)}'; check the user and " \
               "password in the URL"
    if re.search(r"Connection refused|timeout expired|could not connect|could not translate host name|"
                 r"No route to host|Network is unreachable", error):
        return f"cannot reach the PostgreSQL server at {server}; start it, or fix the host and port in the URL"
    return None


def open_storage(url: str):
    """Optuna's RDBStorage for `url`; UsageError that says what to do when it cannot be opened."""
    optuna = _optuna()
    import sqlalchemy.exc

    if re.fullmatch(r"sqlite(\+\w+)?:///?(:memory:)?(\?.*)?", url.strip()):
        raise UsageError(f"--storage {url} is a database in memory: its trials would be lost when the run ends and "
                         "no worker could share them; give a file, sqlite:///path/study.db")
    engine_url, postgres = _postgres(url)
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else {}   # workers wait for each other
    if postgres:
        # pre-ping: a long trial outlives an idle connection that a server or firewall dropped meanwhile
        kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(engine_url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_S,
                                                  grace_period=GRACE_S)
        except ImportError as e:
            module = getattr(e.__cause__, "name", None) or e.name or "?"
            if postgres and "+" not in url.split("://")[0]:
                need, pip = "a PostgreSQL driver", PG_DRIVERS[0][1]
            else:
                need, pip = f"the Python module {module}", dict(PG_DRIVERS).get(module, module)
            pip = {"MySQLdb": "mysqlclient", "pymysql": "PyMySQL"}.get(pip, pip)        # module -> package
            raise UsageError(f"--storage {redact(url)} needs {need}; pip install {pip}") from None
        except Exception as e:
            # Two machines creating Optuna's tables in one new database at once: the later one finds them made
            # (PostgreSQL: a duplicate row or table; SQLite: "table studies already exists").
            race = (isinstance(e, (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError))
                    or isinstance(e, sqlalchemy.exc.OperationalError) and "already exists" in str(e))
            if race and attempt < 2:
                time.sleep(0.5 * (attempt + 1))
                continue
            first = " ".join(str(getattr(e, "orig", None) or e).split())
            todo = _unreachable(first) if postgres else None
            if todo is not None:
                raise UsageError(f"--storage {redact(url)}: {todo}") from None
            raise UsageError(f"--storage '{redact(url)}' is not a storage Optuna can open ({type(e).__name__}: "
                             f"{redact(first)[:160]}); give sqlite:///path/study.db or "
                             "postgresql://user@host/db") from None


def close_storage(storage) -> None:
    """Close the storage's connections (a PostgreSQL server counts them)."""
    engine = getattr(storage, "engine", None)
    if engine is not None:
        engine.dispose()

"""What an example does when the Python running it lacks edgeseq: one line naming the one to use.

Imports nothing outside the standard library, since it runs exactly when the rest is missing.
"""

import os
import sys


def exit_naming_the_python(e: ModuleNotFoundError, script: str, hint: str):
    """Exit with one `Error:` line: the module `e` found missing and the command that runs `script` with
    the clone's .venv Python (paths relative to the working directory unless that climbs out of it),
    then `hint`."""
    script = os.path.abspath(script)
    py, me = (p if os.path.relpath(p).startswith(os.pardir) else os.path.relpath(p) for p in (
        os.path.join(os.path.dirname(os.path.dirname(script)), ".venv", "bin", "python"), script))
    sys.exit(f"Error: {sys.executable} has no module '{e.name}'; run it with the clone's Python: `{py} {me}` {hint}")

"""Exceptions the library raises; the CLI turns them into one-line `Error:` messages. `printable`
escapes a name from a file or model for a terminal or a log; `safe_text` makes a line built
from such names safe as a whole."""


def printable(text) -> str:
    """`text` safe to print on a terminal or write to a log, and unambiguous: every character
    that `str.isprintable` rejects becomes its Python escape, and so does a backslash (`\\\\`),
    so two different names never look alike (a backslash then 'x1b' shows as `\\\\x1b`, an ESC
    as `\\x1b`); everything else is kept as it is.

    Escaped: the Unicode categories Cc (C0 controls, an escape sequence's ESC \\x1b, BEL \\x07,
    CR \\r, LF \\n, NUL \\x00; DEL \\x7f; C1 controls \\x80-\\x9f), Cf (format characters: the
    bidi overrides and isolates \\u202a-\\u202e and \\u2066-\\u2069, zero-width characters),
    Zl and Zp (\\u2028, \\u2029), spaces other than the ASCII space (Zs, e.g. \\xa0), and
    surrogate, private-use and unassigned code points. Letters of any script ("Gehen", "走る",
    "café"), marks, digits, punctuation and symbols are unchanged.

    The one function for every name or value that comes from a file, a model, a message or the
    command line (labels, feature and column names, group names, paths, device ids) on its way
    to a terminal or a log. Escape each name once, where the line is built: a line that holds
    escaped names is made safe as a whole by `safe_text` (or `one_line`), which keeps their
    backslashes as they are.

    >>> printable("wa\\x1b]0;pwned\\x07lk\\u202e")
    'wa\\\\x1b]0;pwned\\\\x07lk\\\\u202e'
    >>> printable("C:\\\\temp")
    'C:\\\\\\\\temp'
    """
    text = str(text)
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in text)


def safe_text(text) -> str:
    """A line or message built from names already escaped by `printable` (or holding none),
    made safe as a whole: a control or format character left in it is escaped as `printable`
    escapes it, and a backslash is kept, so an escaped name is not escaped a second time. Safe
    for a terminal but not unambiguous for a raw name: escape names with `printable`."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    return c.encode("unicode_escape").decode("ascii")


def redact_url(url: str) -> str:
    """`url` with the credentials in its user part hidden, for messages and logs: a password as
    `***` (scheme://user:***@host...), a token (scheme://token@host) as `***` whole. The user
    part runs from the scheme (`x://`, `x:/` or none) to the last `@`, so a password holding
    `/`, `?`, `#` or `@` is hidden whole; text without an `@` comes back as it is."""
    import re
    if "@" not in url:
        return url
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*:/{0,2})?(.*)@(.*)", url, re.S)
    scheme, userinfo, rest = m.group(1) or "", m.group(2), m.group(3)
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{user}:***@{rest}" if ":" in userinfo else f"{scheme}***@{rest}"


def one_line(text) -> str:
    """An error message as one line, shown safely: runs of white space (a library message may
    quote a multi-line OS error) become one space, then any control or format character left
    (a label or column name holding a terminal escape sequence) is escaped (`safe_text`: names
    the message escaped with `printable` where it was built keep their form)."""
    return safe_text(" ".join(str(text).split()))


class EdgeseqError(Exception):
    """Base class: a foreseeable problem with a message that says what to do."""

    exit_code = 1


class UsageError(EdgeseqError):
    """The request itself is wrong (bad option, unknown architecture): exit code 2."""

    exit_code = 2


class DataError(EdgeseqError):
    """A data file or a reading cannot be used."""


class ReadingError(DataError):
    """A reading was rejected before it touched any stream state."""


class ModelFileError(EdgeseqError):
    """A model file is missing, corrupt, or not an edgeseq model."""


class HistoryFullError(EdgeseqError):
    """A bounded-history stream is full and was asked to raise rather than slide."""


class ProviderError(EdgeseqError):
    """The requested execution provider is not available in this onnxruntime."""


class ExportValidationError(EdgeseqError):
    """ONNX Runtime disagrees with torch by more than the tolerance."""

    def __init__(self, message, max_diff=None, tolerance=None):
        super().__init__(message)
        self.max_diff = max_diff
        self.tolerance = tolerance


def run_script(main) -> None:
    """Run an example script's `main()`: an edgeseq error or an OS error (a file that cannot be
    written, a full disk) ends it with one `Error: ...` line on stderr and the error's exit
    code (1, or 2 for a wrong request) instead of a traceback; Ctrl-C exits 130."""
    import sys
    try:
        rc = main()
    except EdgeseqError as e:
        print(f"Error: {one_line(e)}", file=sys.stderr)
        sys.exit(e.exit_code)
    except OSError as e:
        where = f" '{printable(e.filename)}'" if getattr(e, "filename", None) else ""
        print(f"Error: {one_line(f'{e.strerror or e}{where}')}; check the path and free space, then run it again",
              file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rc or 0)

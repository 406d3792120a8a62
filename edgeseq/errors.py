"""Exceptions the library raises; the CLI turns them into one-line `Error:` messages."""


def printable(text) -> str:
    """`text` safe to print on a terminal: each control or unprintable character (an escape
    sequence's ESC, BEL, a newline) as its Python escape (\\x1b, \\x07, \\n); printable text,
    non-ASCII letters included, unchanged. For names and values read from files or messages."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                                                   for c in text)


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
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except OSError as e:
        where = f" '{e.filename}'" if getattr(e, "filename", None) else ""
        print(f"Error: {e.strerror or e}{where}; check the path and free space, then run it again", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rc or 0)

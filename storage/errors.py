"""Errors raised by the storage layer, each with a stable exit code and HTTP status for the CLI and API."""


class DreamflowError(Exception):
    """Base class: a clear message for people, an exit code for the CLI and a status for HTTP."""

    exit_code = 1
    http_status = 400


def from_os_error(exc: OSError) -> DreamflowError:
    """A file-system failure (permissions, a full disk, a file where a folder should be) as a clear error."""
    return DreamflowError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))


class PathError(DreamflowError):
    """A path is absolute, escapes the workspace, or points somewhere it must not."""

    exit_code = 2
    http_status = 400


class NotFound(DreamflowError):
    """The file or node does not exist."""

    exit_code = 3
    http_status = 404


class Conflict(DreamflowError):
    """The request does not fit the current state (e.g. an edit whose text matches 0 or >1 times)."""

    exit_code = 4
    http_status = 409


class Changed(Conflict):
    """The file changed between being read and being replaced (or since the caller read it)."""


class IndexBusy(DreamflowError):
    """Another process held the index lock for longer than the wait timeout."""

    exit_code = 5
    http_status = 503


class IndexRebuilt(DreamflowError):
    """The index was found damaged during the command, set aside and rebuilt from the files; the command
    itself did not finish (the files hold whatever it had written), so it can be checked and run again."""

    exit_code = 10
    http_status = 503

    def __init__(self, damage: str, kept: str):
        super().__init__(f"the index was damaged ({damage}); it was set aside in {kept} and rebuilt from the files. "
                         "The command did not finish: check what it changed, then run it again")
        self.damage, self.kept = damage, kept


class InvalidInput(DreamflowError):
    """An argument has the wrong form (e.g. a date that is not YYYY-MM-DD, start_line after end_line)."""

    exit_code = 2
    http_status = 400


class JobFailed(DreamflowError):
    """A memory job ran but some of its units or items failed; they are left for a retry of the run (the UI's
    Retry re-runs only them) or for the next run. The run ends Failed with this message."""

    exit_code = 9
    http_status = 500

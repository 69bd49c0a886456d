"""Every Dreamflow error, each with a stable exit code and HTTP status for the CLI and API, and the error envelope
all surfaces answer with (`--json`, HTTP, MCP): `{"error": {type, message, exit_code}}`."""


def envelope(kind: str, message: str, exit_code: int) -> dict:
    """The error envelope; `DreamflowError.to_json` for Dreamflow's own errors."""
    return {"error": {"type": kind, "message": message, "exit_code": exit_code}}


class DreamflowError(Exception):
    """Base class: a clear message for people, an exit code for the CLI and a status for HTTP."""

    exit_code = 1
    http_status = 400

    def to_json(self) -> dict:
        """This error as the envelope the CLI's `--json`, the API and MCP answer with."""
        return envelope(type(self).__name__, str(self), self.exit_code)


def from_os_error(exc: OSError) -> DreamflowError:
    """A file-system failure (permissions, a full disk, a file where a folder should be) as a clear error; a write
    the file system refuses (permissions, an immutable or read-only folder) is `NotWritable`."""
    import errno

    message = f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return NotWritable(f"{message} (the file system refuses this: a read-only or immutable folder, or one this "
                           "user may not change)")
    return DreamflowError(message)


class PathError(DreamflowError):
    """A path is absolute, escapes the workspace, or points somewhere it must not."""

    exit_code = 2
    http_status = 400


class NotFound(DreamflowError):
    """The file or node does not exist."""

    exit_code = 3
    http_status = 404


class WorkspaceGone(DreamflowError):
    """The workspace a call or a running job is for is no longer served: removed from the registry, or its folder
    deleted or moved away. Not a `NotFound`: a job must stop, not take it for a file that does not exist yet."""

    exit_code = 3
    http_status = 410


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


class TooLarge(InvalidInput):
    """A job tried to write more into one card or node than `DREAMFLOW_MAX_WRITE_CHARS` allows."""


class Forbidden(DreamflowError):
    """The token may read this workspace but not change it."""

    exit_code = 8
    http_status = 403


class NotWritable(DreamflowError):
    """The file system refuses a write: permissions, an immutable (`chattr +i`) or read-only folder."""

    exit_code = 1
    http_status = 403


class WriteRejected(DreamflowError):
    """A write the job's rules forbid (e.g. it would drop existing links); fails the unit."""

    exit_code = 4
    http_status = 409


class RunStopped(DreamflowError):
    """A job run was cancelled (the UI, its workspace removed) or its service stopped while it ran on a thread of
    the service: it asks the model nothing more and writes nothing more (engine/access/stopped_runs.py)."""

    exit_code = 8
    http_status = 503


class LLMNotConfigured(DreamflowError):
    """No LLM endpoint is configured, so jobs that need one cannot run."""

    exit_code = 6
    http_status = 503


class LLMError(DreamflowError):
    """A call to the LLM failed (timeout, HTTP error) or its answer could not be used."""

    exit_code = 7
    http_status = 502


class AnswerRefused(JobFailed, LLMError):
    """The model's answer broke a content rule again after the repair turn naming it: nothing was written,
    the unit fails and its input is left for a retry (a planned failure, exit code 9)."""

    def __init__(self, message: str, rule: str):
        super().__init__(message)
        self.rule = rule


class UnitsFailed(JobFailed, LLMError):
    """Some units of a job failed (a planned failure, exit code 9); `summary` is the run summary (their paths
    stay un-checkpointed)."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message, summary)
        self.summary = summary

    def __str__(self) -> str:
        return str(self.args[0])


class LLMRejected(LLMError):
    """The endpoint refused the request as malformed (HTTP 400 or 422), e.g. a `response_format` it does not
    know."""


class ServiceUnavailable(DreamflowError):
    """The service named in service.json does not answer."""

    exit_code = 8
    http_status = 503


class ServiceNeeded(DreamflowError):
    """A job tool was called while no `dreamflow start` runs for the workspace."""

    exit_code = 8
    http_status = 503


class ServiceError(DreamflowError):
    """The service cannot start or keep running (port taken, a child keeps crashing, already running)."""

    exit_code = 8
    http_status = 503


class WorkspaceOwned(DreamflowError):
    """Another running service owns the workspace (one owner per workspace)."""

    exit_code = 8
    http_status = 503


class RemoteError(DreamflowError):
    """An error the service reported whose class this process does not know; keeps its code and status."""

    def __init__(self, message: str, exit_code: int = 1, http_status: int = 500):
        super().__init__(message)
        self.exit_code = exit_code
        self.http_status = http_status

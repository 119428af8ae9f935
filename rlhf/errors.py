"""The exceptions that end a script on purpose, and the exit code of each.

Light on purpose (no third-party import), so that every module can raise them.
"""

USER_ERROR_EXIT_CODE = 2
NON_FINITE_EXIT_CODE = 1
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C


class UserError(Exception):
    """A problem the user can fix: reported as one `error: <message>` line, exit code 2, no traceback."""


class NothingToDo(Exception):
    """The command asks for what is already done (the same command on a finished run): said in one line, exit 0."""


class NonFiniteError(RuntimeError):
    """A reward or loss that is NaN or infinite: training stops rather than learn from it (exit code 1)."""


def first_line(error):
    """The first line of an exception's message (its type name if it has none): for one-line reports."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__

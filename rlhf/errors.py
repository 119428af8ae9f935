"""The exceptions that end a script on purpose, and the exit code of each.

Light on purpose (no third-party import), so that every module can raise them.
"""

USER_ERROR_EXIT_CODE = 2
NON_FINITE_EXIT_CODE = 1
INTERRUPTED_EXIT_CODE = 130  # Ctrl-C or SIGTERM: what was finished is saved (128 + SIGINT, as shells report)


class UserError(Exception):
    """A problem the user can fix: reported as one `error: <message>` line, exit code 2, no traceback."""


class NothingToDo(Exception):
    """The command asks for what is already done (the same command on a finished run): said in one line, exit 0."""


class NonFiniteError(RuntimeError):
    """A reward or loss that is NaN or infinite: training stops rather than learn from it (exit code 1).

    `advice`: what to look at, said after the message (where the value came from decides it: a reward function's or
    a model's NaN before any update has nothing to do with the learning rate)."""

    def __init__(self, message, advice="Lower the learning rate or check the reward."):
        super().__init__(message)
        self.advice = advice


def first_line(error):
    """The first line of an exception's message (its type name if it has none): for one-line reports."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__

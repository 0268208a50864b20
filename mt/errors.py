"""The one exception type a user can cause, and the warning type the command line shows.

Anything a user can get wrong (a missing file, mismatched line counts, a bad config key, an
unreadable checkpoint) raises `MTError` with a one-line message that names the thing and the
problem. The CLI prints it to stderr and exits with code 2; it never shows a traceback.
Library code that goes on despite a problem (e.g. a source line cut to the model's maximum
length) issues `warnings.warn(message, MTWarning)`; the CLI prints each one as
`mt: warning: <message>` on stderr.
`Interrupted(signum)` is a second SIGINT/SIGTERM during training: a BaseException, so no
`except Exception` swallows it; the CLI exits 128 + signum.
"""


class MTError(Exception):
    """A user-facing error: `str(error)` is a complete one-line message."""


class MTWarning(UserWarning):
    """A user-facing warning: `str(warning)` is a complete one-line message."""


class Interrupted(BaseException):  # noqa: N818 - named like KeyboardInterrupt, its sibling
    """A second SIGINT/SIGTERM during training: abort at once, without saving. The CLI exits
    with 128 + `signum` (130 for SIGINT, 143 for SIGTERM), as a shell reports a signal. A
    BaseException like KeyboardInterrupt, but not one: click would swallow that into "Aborted!"."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

"""The one exception type a user can cause.

Anything a user can get wrong (a missing file, mismatched line counts, a bad config key, an
unreadable checkpoint) raises `MTError` with a one-line message that names the thing and the
problem. The CLI prints it to stderr and exits with code 2; it never shows a traceback.
"""


class MTError(Exception):
    """A user-facing error: `str(error)` is a complete one-line message."""

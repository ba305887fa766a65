"""The one exception type for user mistakes: the CLI prints its message on one line, exit code 2."""


class UserError(Exception):
    """A mistake in what the user asked for (bad config value, unknown env, missing checkpoint)."""

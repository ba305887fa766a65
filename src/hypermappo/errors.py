"""Exceptions the CLI turns into one line and an exit code (see the `hypermappo.cli` docstring)."""


class UserError(Exception):
    """A mistake in what the user asked for (bad config value, unknown env, missing checkpoint): exit 2."""


class RunFailed(Exception):
    """The run stopped on a fault it detected; the message is one line, `exit_code` says which kind."""

    exit_code = 1


class NonFiniteError(RunFailed):
    """NaN or infinity in env data, a loss, a gradient norm or the weights: the run stops before it
    reaches a checkpoint (exit 3)."""

    exit_code = 3


class EnvFailure(RunFailed):
    """The environment raised (in this process or in a worker process): exit 4."""

    exit_code = 4


class InternalFailure(RunFailed):
    """The library's own code raised where the env is called (e.g. compiling the collection graph, which holds the
    env's step): reported as the library's, never as the env's; exit 1, as any other bug."""

    exit_code = 1


class RunInterrupted(KeyboardInterrupt):
    """SIGINT / SIGTERM stopped the run; a KeyboardInterrupt, so `except KeyboardInterrupt` still sees it.

    `exit_code` is 128 + the signal number (130 for SIGINT, 143 for SIGTERM), as a shell reports it.
    """

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

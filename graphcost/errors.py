"""The one base class of user errors: bad input, not a bug in graphcost.

A `UserError` says which file, path, key or setting is wrong, what was expected and
what was found, in one or two lines. The `graphcost` command prints it as `Error: ...`
and exits with status 2, with no traceback (`graphcost --debug` or GRAPHCOST_DEBUG=1
shows one); any other exception is a bug and keeps its traceback. It subclasses
ValueError so that callers catching ValueError keep working.

An `EnvironmentFault` is the machine's fault, not the input's: a full disk or quota.
The command prints it the same way and exits with status 1. It is no ValueError, so
no reader that skips bad input files can mistake it for one.
"""

from __future__ import annotations


class UserError(ValueError):
    """Input a user can fix (a file, folder, path, setting or model): the message says how."""


class SettingsError(UserError):
    """A `--set` key or value no run can use: names the setting and what it must be."""


class CollectionError(UserError):
    """A folder that holds no usable collection, or not the split asked for."""


class EnvironmentFault(Exception):
    """The machine failed, not the input: a full disk or quota. The message names the
    file or folder and says what was left behind."""

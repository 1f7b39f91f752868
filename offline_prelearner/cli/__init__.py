"""``offline-prelearner``: the command line. It parses arguments, builds configs and calls the
library; it holds no logic of its own.

One module per sub-command, each with the function that adds its parser and the function that
runs it: :mod:`.cmd_record` (a gymnasium env -> offline data), :mod:`.cmd_process` (the batch
job), :mod:`.cmd_inspect` (what a dataset holds, a validation report), :mod:`.cmd_convert`
(formats to each other). :mod:`.app` builds the parser and runs :func:`main`; :mod:`.exits` turns
whatever stopped a command into its exit status and one line (data errors: exit 2, naming the
file, column, episode and row); :mod:`.options` holds what the parsers share, :mod:`.console`
the progress line.
"""

from .app import build_parser, main

__all__ = ["build_parser", "main"]

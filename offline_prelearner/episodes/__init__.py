"""The episode model and what happens to episodes before replay: checks, de-duplication,
stitching of fragments, and the ledger that accounts for every input row.

* :mod:`.columns` -- canonical column names (RLlib's);
* :mod:`.episode_columns` -- :class:`~.episode_columns.EpisodeColumns`: a batch of episodes as
  shared columns, the one form episodes travel in from a reader to the buffer;
* :mod:`.episode` -- :class:`~.episode.Episode`: one agent's trajectory, a read-only view of one
  episode of the columns (or built by a user from their own arrays);
* :mod:`.validate` -- :class:`~.validate.Validator`, the checks on each episode;
* :mod:`.dedupe` -- :class:`~.dedupe.Deduplicator`: episodes already seen are dropped;
* :mod:`.stitch` -- fragments of one episode joined across batches;
* :mod:`.ledger` -- :class:`~.ledger.EpisodeBatch` and :class:`~.ledger.Ledger`: rows in =
  rows kept + rejected + duplicate.

The bottom of the package: nothing here imports from ``io``, ``replay``, ``connectors`` or
``jobs``.
"""

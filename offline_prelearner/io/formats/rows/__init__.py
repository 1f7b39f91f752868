"""Format ``rows``: one transition per row (RLlib's recorder layout).

* :mod:`.reader` -- :class:`~.reader.RowsReader`: rows -> episodes;
* :mod:`.decode` -- a batch's columns decoded into the arrays of its rows;
* :mod:`.frame` -- a batch's columns grouped by episode, in step order;
* :mod:`.row_arrays` -- the per-row arrays the reader builds episodes from;
* :mod:`.open_episodes` -- what a stream of batches leaves open: pending episodes, held rows;
* :mod:`.duplicates` -- rows seen twice, found and counted;
* :mod:`.writer` -- episodes -> rows, as Arrow and Parquet.
"""

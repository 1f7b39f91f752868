"""Jobs: what the command line runs, and the Ray wiring under it.

* :mod:`.pipeline` -- the batch job (Ray engine and local engine) and the learner's stream;
* :mod:`.units` -- units of work a retry can redo: plan, read, run, write;
* :mod:`.commit` -- stage, move into place, write the manifest last;
* :mod:`.convert` -- old-stack batches -> rows or episodes, resumable by unit;
* :mod:`.inspection` -- read, check and count a dataset without writing it;
* :mod:`.record` -- record episodes from a gymnasium env;
* :mod:`.apex` -- feed replay shards from a Ray Data job (Ape-X);
* :mod:`.cli` / :mod:`.console` -- ``offline-prelearner``: arguments, progress, one-line errors.
"""

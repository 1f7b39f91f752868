"""Jobs: what the command line runs, and the Ray wiring under it.

* :mod:`.ray_session` -- the Ray session: start or join, mute, check the address, shut down;
* :mod:`.preflight` -- what every job does first: files, format, spaces, the prelearner class;
* :mod:`.batch_job` -- the batch job (local engine and Ray engine) and its commit;
* :mod:`.learner_stream` -- prelearner actors streaming train batches to learners;
* :mod:`.units` -- units of work a retry can redo: plan, read, run, write;
* :mod:`.commit` -- stage, move into place, write the manifest last;
* :mod:`.convert` -- every format to every format, resumable by unit;
* :mod:`.inspection` -- read, check and count a dataset without writing it;
* :mod:`.record` -- record episodes from a gymnasium env;
* :mod:`.apex` -- feed replay shards from a Ray Data job (Ape-X).

The command line that drives them is :mod:`offline_prelearner.cli`.
"""

"""The learner stream: prelearner actors that read their own files and hand learners train batches.

* :mod:`.learner_stream` -- the actors, the train batches, the splits per learner;
* :mod:`.episode_ranges` -- with several actors, which file range reads which episode (rows
  without ``t`` stay whole);
* :mod:`.apex` -- the same stream feeding replay shards (Ape-X).
"""

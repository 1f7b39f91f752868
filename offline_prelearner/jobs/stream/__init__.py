"""The learner stream: prelearner actors that read their own files and hand learners train batches.

* :mod:`.learner_stream` -- the actors, the train batches, the splits per learner;
* :mod:`.episode_ranges` -- with several actors, which file range reads which episode (rows
  without ``t`` stay whole);
* :mod:`.epoch_order` / :mod:`.epochs` -- the stream with epochs: an order that is a function
  of (seed, epoch), shuffled across units and within windows, and a position that resumes;
* :mod:`.apex` -- the same stream feeding replay shards (Ape-X).
"""

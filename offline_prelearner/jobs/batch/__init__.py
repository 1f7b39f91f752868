"""The batch job: plan units of work, run them on an engine (in-process or Ray Data), commit.

* :mod:`.batch_job` -- the job: its engines, retries and the commit of its output;
* :mod:`.units` -- units of work a retry can redo: plan, read, run, write;
* :mod:`.file_tally` -- what each input file gave (rows read, episodes, rejections).
"""

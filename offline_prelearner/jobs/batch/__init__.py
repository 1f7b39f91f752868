"""The batch job: plan units of work, run them on an engine (in-process or Ray tasks), commit.

* :mod:`.batch_job` -- the job: its engines, retries and the commit of its output;
* :mod:`.plan` -- the units of work a retry can redo: which rows of which files each reads;
* :mod:`.run` -- one unit run: read its rows, a fresh prelearner, its files and record written;
* :mod:`.file_tally` -- what each input file gave (rows read, episodes, rejections).
"""

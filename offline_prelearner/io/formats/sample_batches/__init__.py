"""Format ``sample_batches``: RLlib's old-stack SampleBatch / MultiAgentBatch records.

* :mod:`.reader` -- :class:`~.reader.SampleBatchesReader`: records -> episodes;
* :mod:`.records` -- old-stack records -> flat per-step columns.
"""

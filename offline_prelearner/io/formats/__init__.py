"""One folder per input format: its reader (a batch -> episodes), its layout on disk, its writer.

* :mod:`.rows` -- one transition per row (RLlib's recorder layout): reader, frames,
  duplicates, and the writer (episodes -> rows);
* :mod:`.episodes` -- msgpack episode records in an ``item`` column: reader and fast decoder;
* :mod:`.sample_batches` -- RLlib's old-stack SampleBatch / MultiAgentBatch records;
* :mod:`.minari` -- Minari 0.5.4 datasets (hdf5, arrow, parquet): layout, reader, writer;
* :mod:`.d4rl` -- D4RL's flat HDF5 files: layout and reader;
* :mod:`.base` -- what a reader is (:class:`~.base.Reader`);
* :mod:`.composite` -- struct (Dict / Tuple) observation columns <-> their leaves.

Formats import the shared io modules below them, never :mod:`..readers`, which picks one by name.
"""

"""Data in and out: where the files are, what their columns mean, how cells decode, and one
folder per input format (its reader, its layout on disk, its writer).

* :mod:`.sources` -- input paths, file formats, reading one file as a table;
* :mod:`.schema` -- :class:`~.schema.ColumnSchema`: canonical field -> dataset column;
* :mod:`.arrow_numpy` -- Arrow / Ray tensor columns <-> numpy;
* :mod:`.codec` -- lz4 + msgpack-numpy with size limits; safe legacy decoding;
* :mod:`.readers` -- the reader for a format name, each format loaded on first use;
* :mod:`.formats` -- one folder per input format: ``rows``, ``episodes``, ``sample_batches``,
  ``minari``, ``d4rl``;
* :mod:`.quarantine` -- what was refused, with the reasons, to Parquet.

Nothing here imports Ray.
"""

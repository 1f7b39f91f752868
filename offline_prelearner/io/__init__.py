"""Data in and out: where the files are, what their columns mean, how cells decode, the readers
that turn batches into episodes (one per format), and the writers that turn episodes into rows.

* :mod:`.sources` -- input paths, file formats, reading one file as a table;
* :mod:`.schema` -- :class:`~.schema.ColumnSchema`: canonical field -> dataset column;
* :mod:`.arrow_columns` -- Arrow / Ray tensor columns <-> numpy;
* :mod:`.codec` -- lz4 + msgpack-numpy with size limits; safe legacy decoding;
* :mod:`.readers` -- one reader per input format, by name;
* :mod:`.datasets` -- the field's layouts on disk (Minari, D4RL) read as tables, and Minari out;
* :mod:`.writers` -- episodes -> rows in RLlib's recorder layout;
* :mod:`.quarantine` -- what was refused, with the reasons, to Parquet.

Nothing here imports Ray.
"""

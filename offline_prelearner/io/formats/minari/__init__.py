"""Format ``minari``: Minari 0.5.4 datasets (hdf5, arrow, parquet backends), without Minari.

* :mod:`.dataset` -- ids -> folders, ``metadata.json`` and its spaces, one file as a step table;
* :mod:`.reader` -- :class:`~.reader.MinariReader`: step tables -> episodes;
* :mod:`.writer` -- episodes -> a Minari dataset (the hdf5 layout) ``minari.load_dataset`` opens.

h5py and Pillow load on first use (:mod:`...optional`).
"""

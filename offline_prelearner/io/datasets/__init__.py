"""The field's dataset layouts on disk, read (and written) without their libraries.

* :mod:`.minari` -- Minari 0.5.4 datasets (hdf5, arrow, parquet backends): ids -> folders,
  ``metadata.json`` and its spaces, the data files, and one file as a *step table*;
* :mod:`.d4rl` -- D4RL's flat HDF5 files as a step table;
* :mod:`.minari_write` -- episodes -> a Minari dataset (the hdf5 layout) that
  ``minari.load_dataset`` opens;
* :mod:`.optional` -- h5py and Pillow, imported on first use with an install hint.

A step table is an Arrow table a reader in :mod:`..readers` turns into episodes; its layout is
described where it is built. Nothing here imports h5py or Pillow at import time.
"""

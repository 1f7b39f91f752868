"""Format ``d4rl``: D4RL's flat HDF5 files.

* :mod:`.dataset` -- one file as a step table;
* :mod:`.reader` -- :class:`~.reader.D4RLReader`: the step table split into episodes.
"""

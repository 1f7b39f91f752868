"""One folder per input format: its reader (a batch -> episodes), its layout on disk, its writer.

* :mod:`.rows` -- one transition per row (RLlib's recorder layout): reader, frames,
  duplicates, and the writer (episodes -> rows);
* :mod:`.episodes` -- msgpack episode records in an ``item`` column: reader and fast decoder;
* :mod:`.sample_batches` -- RLlib's old-stack SampleBatch / MultiAgentBatch records;
* :mod:`.minari` -- Minari 0.5.4 datasets (hdf5, arrow, parquet): layout, reader, writer;
* :mod:`.d4rl` -- D4RL's flat HDF5 files: layout and reader;
* :mod:`.lerobot` -- LeRobot datasets (v3.0, v2.1): metadata, PyAV video decoding, reader;
* :mod:`.base` -- what a reader is (:class:`~.base.Reader`);
* :mod:`.registry` -- what a format is (:class:`~.registry.InputFormat`: its reader, how its
  files and batches are detected, whether its files are read whole) and the formats registered;
* :mod:`.composite` -- struct (Dict / Tuple) observation columns <-> their leaves.

Each folder declares its format in its ``spec.py``; the built-ins are registered here, in the
order detection tries them (``rows``, the fallback, last whatever the order). A new format is
one folder plus one line in :data:`BUILT_IN` (or one :func:`~.registry.register_format` call from
the user's code).

Formats import the shared io modules below them, never :mod:`..readers`, which picks one by name.
"""

from .d4rl.spec import D4RL
from .episodes.spec import EPISODES
from .lerobot.spec import LEROBOT
from .minari.spec import MINARI
from .registry import InputFormat, register_format
from .rows.spec import ROWS
from .sample_batches.spec import SAMPLE_BATCHES

#: The built-in formats, in detection order.
BUILT_IN: tuple[InputFormat, ...] = (MINARI, D4RL, LEROBOT, EPISODES, SAMPLE_BATCHES, ROWS)

for _spec in BUILT_IN:
    register_format(_spec)

"""Format ``episodes``: msgpack episode records in an ``item`` column.

* :mod:`.reader` -- :class:`~.reader.EpisodesReader`: records -> episodes, fast path first;
* :mod:`.layout` -- the fast path's msgpack at the byte level: headers, scalars, per-step
  element templates;
* :mod:`.scanner` -- :class:`~.scanner.EpisodeScanner`: learns a record's layout, one record
  at a time;
* :mod:`.decoder` -- :func:`~.decoder.decode_batch`: matches learned layouts against a whole
  batch, checks, and builds the episodes.

Anything unfamiliar falls back to the general path (``codec.unpackb`` + ``Episode.from_state``).
"""

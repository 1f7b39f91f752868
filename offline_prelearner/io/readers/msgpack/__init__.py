"""Fast decoding of msgpack episode records (the ``episodes`` format) with numpy.

* :mod:`.layout` -- msgpack at the byte level: headers, scalars, per-step element templates;
* :mod:`.scanner` -- :class:`~.scanner.EpisodeScanner`: learns a record's layout, one record
  at a time;
* :mod:`.decoder` -- :func:`~.decoder.decode_batch`: matches learned layouts against a whole
  batch, checks, and builds the episodes.

Anything unfamiliar falls back to the general path (``codec.unpackb`` + ``Episode.from_state``).
"""

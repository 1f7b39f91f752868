"""Storage: the columnar ring of timesteps every buffer holds.

* :mod:`.ring` -- :class:`EpisodeStorage`, the ring itself, with its episode table (:mod:`.table`);
* :mod:`.placement` -- batched adds: where a run of new episodes lands in the ring;
* :mod:`.state` -- the checks on a saved state before the ring restores it;
* :mod:`.changes` -- what an add did (:class:`Change`, :class:`Placements`);
* :mod:`.obs_leaves` -- where the observation leaves (plain or composite) live in the ring;
* :mod:`.memory` -- anonymous pages for the large columns.
"""

from .changes import Change, Placements
from .ring import EpisodeStorage
from .table import EpisodeTable

__all__ = ["Change", "EpisodeStorage", "EpisodeTable", "Placements"]

"""The settings of a conversion (:class:`ConvertConfig`), checked where they are made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ...config import ReadConfig, check_choice, check_int
from ...errors import ConfigError, shown
from ...io.fast_tensor import Layout, check_layout
from ...io.formats.lerobot.writer import VIDEO_CODECS, VideoCodec
from ...io.formats.sample_batches.reader import DonesRule

__all__ = ["TARGETS", "ConvertConfig", "Target"]

Target = Literal["rows", "episodes", "minari", "lerobot"]
TARGETS: tuple[Target, ...] = ("rows", "episodes", "minari", "lerobot")

#: The most rows (episodes) a written file may be asked to hold.
MAX_PER_FILE = 2**31 - 1


def _auto_read() -> ReadConfig:
    return ReadConfig(format="auto")


@dataclass(frozen=True)
class ConvertConfig:
    """What a conversion writes, and how it reads its input.

    Every field is checked when the config is made, with a message naming it.

    Attributes:
        to: ``"rows"`` (RLlib's recorder row layout plus ``t``), ``"episodes"`` (msgpack
            ``SingleAgentEpisode`` records), ``"minari"`` (a Minari dataset) or ``"lerobot"``
            (a LeRobot v3.0 dataset, cameras as video: :mod:`~...io.formats.lerobot.writer`).
        read: The reader's options (``legacy_pickle``, ``schema``, ``limits``, ``on_invalid``);
            ``format="auto"`` (the default here) detects the input's format from the files.
        fragments: Episodes that never end within the data: ``"keep"`` writes them not done,
            ``"reject"`` refuses them (counted under reason ``not_done``).
        dones: How old-stack input's legacy ``dones`` column is read: ``"auto"`` (truncated
            where the info says ``TimeLimit.truncated``, else terminated), ``"terminated"`` or
            ``"truncated"``.
        rows_per_file: ``to="rows"``: at most this many rows per file (an episode is never cut).
        episodes_per_file: ``to="episodes"``: at most this many episodes per file.
        layout: ``to="rows"``: how per-step arrays are held -- ``"rllib"`` (Ray's tensor
            extension, which RLlib reads; the default), ``"fast"``
            (:mod:`~offline_prelearner.io.fast_tensor`), ``"lists"`` or ``"auto"``.
        env_id: A gymnasium env id whose registered spec (and spaces, where the source has
            none) is written with the data; None: the source's, if any.
        dataset_id: ``to="minari"``: the Minari id written; None: ``out_dir``'s
            ``<parent>/<name>``, or ``<name>`` where Minari refuses the parent as a namespace
            (:func:`~.dataset.default_dataset_id`).
        fps: ``to="lerobot"``: the dataset's frames per second (``info.json``'s ``fps``; a
            frame's timestamp is its index over ``fps``); None: a LeRobot source's, else 30.
        video_codec: ``to="lerobot"``: how cameras are encoded: ``"av1"`` (LeRobot's default,
            lossy), ``"h264"`` (lossy) or ``"lossless"`` (H.264 RGB, qp 0: frames read back bit
            for bit).
    """

    to: Target
    read: ReadConfig = field(default_factory=_auto_read)
    fragments: Literal["keep", "reject"] = "keep"
    dones: DonesRule = "auto"
    rows_per_file: int = 100_000
    episodes_per_file: int = 1_000
    layout: Layout = "rllib"
    env_id: str | None = None
    dataset_id: str | None = None
    fps: int | None = None
    video_codec: VideoCodec = "av1"

    def __post_init__(self) -> None:
        check_choice("to", self.to, TARGETS)
        if not isinstance(self.read, ReadConfig):
            raise ConfigError(f"read must be a ReadConfig, found {shown(self.read)}")
        check_choice("fragments", self.fragments, ("keep", "reject"))
        check_choice("dones", self.dones, ("auto", "terminated", "truncated"))
        check_int("rows_per_file", self.rows_per_file, 1, MAX_PER_FILE)
        check_int("episodes_per_file", self.episodes_per_file, 1, MAX_PER_FILE)
        check_int("fps", self.fps, 1, 1_000_000, none_ok=True)
        check_choice("video_codec", self.video_codec, tuple(VIDEO_CODECS))
        try:
            object.__setattr__(self, "layout", check_layout(self.layout))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        for name in ("env_id", "dataset_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{name} must be a string (an id), found {shown(value)}")

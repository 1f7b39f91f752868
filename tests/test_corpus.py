"""The corpus of bad and hostile inputs (issue 13), each run through the command line.

Every case is one row of :data:`CASES`: a maker from ``corpus/make_corpus.py`` writes the input,
the command runs (``cli.main`` in this process, or ``python -m offline_prelearner`` with
``CORPUS_SUBPROCESS=1``), and the outcome must be what issue 13 asks for:

* a refusal exits 2 (1 is for our own bugs) with exactly one line on stderr, no traceback, holding
  every fragment in ``err`` (file name, column, episode, row, line, the option to use) and, under
  ``hint``, what to do about it (checked by :func:`test_refusal_says_what_to_do`);
* a success exits 0 with nothing on stderr, and the JSON it prints (``inspect``, ``convert``) or
  the job's ``stats.json`` (``process``) holds ``counts``;
* a refused job leaves ``--out`` uncreated, and no pickle payload ever runs (``PWNED``).

A case the code does not meet yet is marked ``xfail(strict=True)`` with what is missing: the
xfails are issue 13's to-do list, and a fix turns its case into an XPASS failure until the mark is
removed. See ``corpus/README.md`` for adding a case when a user reports a bug.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from corpus import make_corpus as mc

from offline_prelearner import cli

# ------------------------------------------------------------------------------------------------
# expectations
# ------------------------------------------------------------------------------------------------
EP0 = "2516ac85e2eb45e38cdb31fe6899a08e"  # first shipped episode (18 steps): rows 0-17
EP2 = "52eb2ae43367410f926e381087c1843c"  # third shipped episode: item row 2 of episode files

PROCESS = "process {in} --out {out} --engine local --json"
PROCESS_SKIP = PROCESS + " --on-invalid skip"
INSPECT = "inspect {in} --json"  # inspect's default policy is skip: counts, not refusals
INSPECT_RAISE = INSPECT + " --on-invalid raise"
CONVERT = "convert {in} --to rows --out {out} --json"
LIMIT_1MIB = """--set 'read.limits={"max_decompressed_bytes":1048576}'"""

SKIP_DATA = "--on-invalid"  # what to do about bad data: skip or quarantine it (and count it)


@dataclass(frozen=True)
class Check:
    """A named predicate on a count (for values not known exactly)."""

    name: str
    test: Callable[[Any], bool]

    def __repr__(self) -> str:
        return self.name


def contains(text: str) -> Check:
    return Check(f"a text holding {text!r}", lambda v: isinstance(v, str) and text in v)


POSITIVE = Check("> 0", lambda v: isinstance(v, int | float) and v > 0)
REFUSED = Check("a non-empty reason", lambda v: isinstance(v, str) and bool(v.strip()))


@dataclass(frozen=True)
class Case:
    """One corpus entry.

    Attributes:
        id: The test id.
        make: A maker in ``corpus/make_corpus.py``.
        cmd: The command; ``{in}`` is the maker's path, ``{out}`` is ``<case dir>/out`` and
            ``{tmp}`` the case dir (where makers put config files and schemas).
        exit: The exit status the issue asks for.
        err: Fragments the single stderr line must hold (exit != 0).
        counts: Values in the printed JSON (``inspect``/``convert``) or in ``stats.json``
            (``process``), by key path (see :func:`lookup`).
        hint: What the line must tell the user to do (a separate test).
        todo: What is missing for the main check (an xfail reason), if anything.
        hint_todo: What is missing for the hint, if anything (None: the main check's ``todo``;
            ``""``: nothing, the hint is met though the main check is not).
        needs_non_root: Skip when run as root (root reads a chmod 000 file).
    """

    id: str
    make: str
    cmd: str
    exit: int
    err: tuple[str, ...] = ()
    counts: Mapping[str, Any] = field(default_factory=dict)
    hint: str | None = None
    todo: str | None = None
    hint_todo: str | None = None
    needs_non_root: bool = False


def refuse(id: str, make: str, cmd: str, *err: str, **kw: Any) -> Case:
    return Case(id, make, cmd, 2, err, **kw)


def accept(id: str, make: str, cmd: str, counts: Mapping[str, Any], **kw: Any) -> Case:
    return Case(id, make, cmd, 0, (), counts, **kw)


# Reasons shared by several cases: one line of the to-do list each.


def data_refusal(id: str, make: str, cmd: str, *err: str, **kw: Any) -> Case:
    """A refusal of bad data under the default policy: it must also say --on-invalid."""
    kw.setdefault("hint", SKIP_DATA)
    return refuse(id, make, cmd, *err, **kw)


# fmt: off
CASES: list[Case] = [
    # --- the "Why": inputs accepted silently or refused with a traceback ---------------
    refuse("mixed-rllib-rows-and-old-stack-json", "rllib_rows_and_old_stack_json", PROCESS,
           "cartpole-v1_old_stack_json_uncompressed.json", "'rows'", "'sample_batches'"),
    refuse("mixed-rllib-rows-and-old-stack-json-inspect", "rllib_rows_and_old_stack_json",
           INSPECT, "cartpole-v1_rows_uncompressed.parquet", "'rows'", "'sample_batches'"),
    refuse("mixed-rows-and-old-stack-json", "rows_and_old_stack_json", PROCESS,
           "zz-recorded.json", "'rows'", "'sample_batches'"),
    refuse("mixed-rows-and-old-stack-json-convert", "rows_and_old_stack_json", CONVERT,
           "zz-recorded.json", "'rows'", "'sample_batches'"),
    refuse("mixed-rows-and-episodes", "rows_and_episodes", PROCESS,
           "zz-recorded.parquet", "'rows'", "'episodes'"),
    refuse("mixed-rows-and-episodes-inspect", "rows_and_episodes", INSPECT,
           "zz-recorded.parquet", "'rows'", "'episodes'"),
    data_refusal("zero-byte-parquet-after-good", "zero_byte_parquet_last", PROCESS,
                 "zz-empty.parquet"),
    accept("zero-byte-parquet-after-good-skip", "zero_byte_parquet_last", PROCESS_SKIP,
           {"rows_in": 5000, "per_file[zz-empty.parquet].error": REFUSED}),
    accept("zero-byte-parquet-after-good-inspect", "zero_byte_parquet_last", INSPECT,
           {"rows": 5000, "files_unreadable.0": contains("zz-empty.parquet"),
            "per_file[zz-empty.parquet].error": REFUSED}),
    refuse("zero-byte-parquet-first", "zero_byte_parquet_first", PROCESS, "00-empty.parquet"),
    refuse("zero-byte-parquet-alone", "zero_byte_parquet_alone", PROCESS, "empty.parquet"),
    data_refusal("t-contradicts-obs", "t_contradicts_obs", PROCESS,
                 "swapped-t.parquet", "new_obs", EP0),
    accept("t-contradicts-obs-inspect-skip", "t_contradicts_obs", INSPECT,
           {"episodes": 3, "rejected_episodes.*": 1, "rejected.*": 18}),
    data_refusal("row-order-contradicts-obs-without-t", "order_contradicts_obs_without_t",
                 PROCESS, "swapped-rows.parquet", "new_obs", EP0, "row 3"),
    data_refusal("text-named-parquet-after-good", "text_named_parquet_last", PROCESS,
                 "zz-notes.parquet"),
    accept("text-named-parquet-after-good-skip", "text_named_parquet_last", PROCESS_SKIP,
           {"rows_in": 5000, "per_file[zz-notes.parquet].error": REFUSED}),
    refuse("text-named-parquet-first", "text_named_parquet_first", PROCESS, "00-notes.parquet"),
    refuse("invalid-yaml-config", "invalid_yaml_config",
           PROCESS + " --config {tmp}/config.yaml", "config.yaml", "line 3"),
    data_refusal("old-stack-value-42-convert", "old_stack_value_42", CONVERT,
                 "value42.json", "line 4"),
    data_refusal("old-stack-value-42-process", "old_stack_value_42", PROCESS,
                 "value42.json", "line 4"),
    data_refusal("old-stack-value-42-inspect", "old_stack_value_42", INSPECT_RAISE,
                 "value42.json", "line 4"),
    data_refusal("old-stack-value-42-alone-convert", "old_stack_value_42_alone", CONVERT,
                 "value42.json", "line 1"),
    refuse("out-is-a-file-process", "out_is_a_file_rows", PROCESS, "--out", "is a file"),
    refuse("out-is-a-file-convert", "out_is_a_file_old_stack", CONVERT, "--out", "is a file"),
    # sample_all reads the 5000 rows as one chunk (ray.batch_size "auto"): no episode is cut
    accept("shipped-episodes-counted-once-process", "shipped_rows_as_is", PROCESS,
           {"rows_in": 5000, "episodes_kept": 222, "fragments": 222}),
    accept("shipped-episodes-counted-once-small-batches", "shipped_rows_as_is",
           PROCESS + " --set ray.batch_size=300", {"rows_in": 5000, "episodes_kept": 222}),
    accept("shipped-inspect", "shipped_rows_as_is", INSPECT,
           {"rows": 5000, "episodes": 222, "terminated": 221, "truncated": 1}),
    accept("per-file-listing-inspect", "shipped_rows_as_is", INSPECT,
           {"per_file[cartpole-v1-rows-00000.parquet].format": "rows",
            "per_file[cartpole-v1-rows-00000.parquet].rows_read": 1000,
            "per_file[cartpole-v1-rows-00004.parquet].rows_read": 1000}),
    accept("per-file-listing-process", "shipped_rows_as_is", PROCESS,
           {"per_file[cartpole-v1-rows-00000.parquet].format": "rows",
            "per_file[cartpole-v1-rows-00000.parquet].rows_read": 1000,
            "per_file[cartpole-v1-rows-00000.parquet].rows_kept": 1000}),
    # --- Parquet files that are not whole ------------------------------------------------------
    refuse("truncated-parquet", "truncated_parquet_alone", PROCESS, "cut.parquet"),
    data_refusal("truncated-parquet-after-good", "truncated_parquet_among_good", PROCESS,
                 "zz-cut.parquet"),
    accept("truncated-parquet-after-good-skip", "truncated_parquet_among_good", PROCESS_SKIP,
           {"rows_in": 5000, "per_file[zz-cut.parquet].error": REFUSED}),
    accept("truncated-parquet-after-good-inspect", "truncated_parquet_among_good", INSPECT,
           {"rows": 5000, "per_file[zz-cut.parquet].error": REFUSED}),
    refuse("random-bytes-parquet", "random_bytes_parquet", PROCESS, "noise.parquet"),
    # A valid Parquet file of zero rows is an empty partition (Spark writes them): read, counted.
    accept("zero-row-parquet", "zero_row_parquet", PROCESS,
           {"rows_in": 0, "per_file[no-rows.parquet].rows_read": 0,
            "per_file[no-rows.parquet].error": None}),
    accept("zero-row-parquet-inspect", "zero_row_parquet", INSPECT_RAISE,
           {"rows": 0, "per_file[no-rows.parquet].rows_read": 0,
            "per_file[no-rows.parquet].error": None}),
    # --- columns: types, presence, nulls -------------------------------------------------------
    data_refusal("rewards-as-strings", "rewards_as_strings", PROCESS,
                 "str-rewards.parquet", "'rewards'"),
    data_refusal("actions-as-strings", "actions_as_strings", PROCESS,
                 "str-actions.parquet", "'actions'"),
    data_refusal("terminateds-as-strings", "terminateds_as_strings", PROCESS,
                 "str-dones.parquet", "'terminateds'"),
    refuse("missing-eps-id", "missing_eps_id", PROCESS, "no-eps-id.parquet", "eps_id", "schema"),
    refuse("missing-obs-and-new-obs", "missing_obs_and_new_obs", PROCESS,
           "no-obs.parquet", "'obs'", "'new_obs'", "observation"),
    data_refusal("null-eps-id", "null_eps_id", PROCESS, "null-eps-id.parquet", "eps_id", "row 5"),
    data_refusal("null-obs-cell", "null_obs_cell", PROCESS, "null-obs.parquet", "'obs'", "row 5"),
    # --- values and episode contracts ----------------------------------------------------------
    data_refusal("nan-reward", "nan_reward", PROCESS,
                 "nan-reward.parquet", "'rewards'", EP0, "t=5"),
    data_refusal("inf-reward", "inf_reward", PROCESS,
                 "inf-reward.parquet", "'rewards'", EP0, "t=5"),
    accept("nan-reward-skip", "nan_reward", PROCESS_SKIP,
           {"rows_in": 59, "rows_rejected.*": 18, "episodes_kept": 3, "rows_balance": True}),
    accept("nan-reward-quarantine", "nan_reward",
           INSPECT + " --on-invalid quarantine --quarantine-dir {tmp}/q",
           {"rejected.*": 18, "quarantine_file": REFUSED}),
    accept("nan-reward-after-good-skip", "nan_reward_among_good", PROCESS_SKIP,
           {"rows_in": 5034, "rows_rejected.*": 18,
            "per_file[zz-nan.parquet].rows_read": 34,
            "per_file[zz-nan.parquet].rows_rejected": 18}),
    data_refusal("obs-shape-changes-mid-episode", "obs_shape_changes_mid_episode", PROCESS,
                 "shape.parquet", "'obs'", EP0, "row 5"),
    data_refusal("duplicate-eps-t-different-content", "duplicate_eps_t_different_content",
                 PROCESS, "twin.parquet", EP0, "t=3", "row 59"),
    accept("duplicate-eps-t-different-content-skip", "duplicate_eps_t_different_content",
           PROCESS_SKIP, {"rows_in": 60, "rows_rejected.*": POSITIVE, "rows_balance": True}),
    accept("duplicate-file", "duplicate_file", PROCESS,
           {"rows_in": 118, "rows_duplicate": 59, "episodes_kept": 4, "rows_balance": True}),
    accept("duplicate-file-inspect", "duplicate_file", INSPECT,
           {"episodes": 4, "duplicates": 4, "duplicate_rows": 59}),
    data_refusal("done-mid-episode", "done_mid_episode", PROCESS,
                 "done-early.parquet", "'terminateds'", EP0, "row 5"),
    accept("terminated-and-truncated-same-step", "terminated_and_truncated_same_step", INSPECT,
           {"episodes": 4, "terminated": 4, "truncated": 0}),
    accept("terminated-and-truncated-same-step-process", "terminated_and_truncated_same_step",
           PROCESS, {"rows_in": 59, "episodes_kept": 4, "rows_rejected": {}}),
    data_refusal("negative-t", "negative_t", PROCESS, "negative-t.parquet", "'t'", EP0, "row 0"),
    data_refusal("float-t", "float_t", PROCESS, "float-t.parquet", "'t'"),
    data_refusal("t-gap", "t_gap", PROCESS, "t-gap.parquet", "'t'", EP0, "row 3"),
    # --- paths ---------------------------------------------------------------------------------
    refuse("non-data-file-among-good", "non_data_file_among_good", PROCESS, "notes.txt"),
    refuse("dangling-symlink-among-good", "dangling_symlink_parquet", PROCESS,
           "zz-gone.parquet"),
    refuse("unreadable-file", "unreadable_file", PROCESS, "zz-locked.parquet", "ermission",
           needs_non_root=True),
    refuse("no-data-files", "no_data_files", PROCESS, "no data files"),
    refuse("empty-dir", "empty_dir", INSPECT, "no data files"),
    refuse("glob-matching-nothing", "glob_matching_nothing", PROCESS, "*.jsonl"),
    refuse("missing-path", "missing_path", CONVERT, "no-such-folder"),
    # --- packed columns, pickles, bombs --------------------------------------------------------
    refuse("legacy-packed-without-flag", "legacy_packed_rows", PROCESS,
           "packed.parquet", "'obs'", "--legacy-pickle"),
    accept("legacy-packed-with-flag", "legacy_packed_rows", PROCESS + " --legacy-pickle",
           {"rows_in": 34, "episodes_kept": 2}),
    refuse("rllib-compressed-without-flag", "rllib_compressed_rows", INSPECT_RAISE,
           "cartpole-v1_rows_compressed.parquet", "--legacy-pickle"),
    data_refusal("legacy-pickle-runs-code", "legacy_pickle_runs_code",
                 PROCESS + " --legacy-pickle", "packed.parquet", "'obs'", "row 5", "mkdir"),
    accept("legacy-pickle-runs-code-skip", "legacy_pickle_runs_code",
           PROCESS_SKIP + " --legacy-pickle", {"rows_in": 34, "rows_rejected.*": 18}),
    data_refusal("legacy-pickle-not-an-array", "legacy_pickle_not_an_array",
                 PROCESS + " --legacy-pickle", "packed.parquet", "'obs'", "row 5"),
    data_refusal("legacy-pickle-foreign-class", "legacy_pickle_foreign_class",
                 PROCESS + " --legacy-pickle", "packed.parquet", "fractions.Fraction", "row 5"),
    data_refusal("legacy-pickle-huge-array", "legacy_pickle_huge_array",
                 PROCESS + " --legacy-pickle", "packed.parquet", "limit", "row 5"),
    data_refusal("legacy-lz4-bomb", "legacy_lz4_bomb", PROCESS + " --legacy-pickle " + LIMIT_1MIB,
                 "packed.parquet", "limit", "row 5"),
    data_refusal("lz4-msgpack-bomb", "lz4_msgpack_bomb",
                 PROCESS + " --schema {tmp}/schema.json " + LIMIT_1MIB,
                 "packed.parquet", "limit", "row 5"),
    data_refusal("lz4-declared-size-bomb", "lz4_declared_size_bomb",
                 PROCESS + " --schema {tmp}/schema.json", "packed.parquet", "declares", "row 5"),
    # --- msgpack episodes ----------------------------------------------------------------------
    data_refusal("episodes-corrupt-bytes", "episodes_corrupt_bytes", PROCESS,
                 "corrupt.parquet", "'item'", "row 2"),
    accept("episodes-corrupt-bytes-inspect", "episodes_corrupt_bytes", INSPECT,
           {"episodes": 5, "rejected.*": 1}),
    data_refusal("episodes-truncated-record", "episodes_truncated_record", PROCESS,
                 "cut-record.parquet", "'item'", "row 2"),
    data_refusal("episodes-object-dtype-pickle", "episodes_object_dtype_pickle", PROCESS,
                 "object-dtype.parquet", "'item'", "row 2", "refused"),
    accept("episodes-object-dtype-pickle-skip", "episodes_object_dtype_pickle", PROCESS_SKIP,
           {"rows_in": 6, "rows_rejected.*": 1, "episodes_kept": 5}),
    data_refusal("episodes-declared-size-bomb", "episodes_declared_size_bomb", PROCESS,
                 "shape-bomb.parquet", "'item'", "row 2"),
    data_refusal("episodes-bin-header-bomb", "episodes_bin_header_bomb", PROCESS,
                 "bin-bomb.parquet", "'item'", "row 2"),
    data_refusal("episodes-lengths-disagree", "episodes_lengths_disagree", PROCESS,
                 "lengths.parquet", "rewards", EP2, "row 2"),
    data_refusal("episodes-nan-reward", "episodes_nan_reward", PROCESS,
                 "nan.parquet", "'rewards'", EP2, "t=3"),
    data_refusal("episodes-not-msgpack", "episodes_not_msgpack", PROCESS,
                 "text-record.parquet", "'item'", "row 2"),
    data_refusal("episodes-record-not-a-map", "episodes_record_not_a_map", PROCESS,
                 "list-record.parquet", "'item'", "row 2"),
    data_refusal("episodes-multi-agent", "episodes_multi_agent", PROCESS,
                 "multi-agent.parquet", "row 2", "MultiAgentEpisode"),
    refuse("episodes-item-as-text", "episodes_item_as_text", PROCESS,
           "item-text.parquet", "'item'"),
    refuse("rows-read-as-episodes", "good_rows", PROCESS + " --format episodes",
           "good.parquet", "'item'"),
    refuse("episodes-read-as-rows", "good_episodes", PROCESS + " --format rows",
           "good-episodes.parquet", "'eps_id'"),
    # --- old-stack JSON lines ------------------------------------------------------------------
    accept("old-stack-good-convert", "old_stack_good", CONVERT,
           {"rows_in": 45, "rows_out": 45, "episodes_written": 3}),
    data_refusal("json-non-object-line", "json_non_object_line", CONVERT,
                 "list-line.json", "line 2"),
    data_refusal("json-non-object-line-process", "json_non_object_line", PROCESS,
                 "list-line.json", "line 2"),
    accept("json-non-object-line-skip", "json_non_object_line", CONVERT + " --on-invalid skip",
           {"records_rejected.*": 1, "episodes_written": 3}),
    data_refusal("json-broken-line", "json_broken_line", CONVERT, "broken-line.json", "line 3"),
    refuse("json-empty-file", "json_empty_file", CONVERT, "empty.json"),
    refuse("json-empty-file-process", "json_empty_file", PROCESS, "empty.json"),
    data_refusal("json-unknown-type", "json_unknown_type", CONVERT,
                 "unknown-type.json", "line 2", "TrajectoryBatch"),
    data_refusal("json-ragged-columns", "json_ragged_columns", CONVERT,
                 "ragged.json", "line 2", "'rewards'"),
    refuse("json-missing-obs", "json_missing_obs", CONVERT, "no-obs.json", "'obs'"),
    refuse("json-compressed-without-flag", "json_compressed_old_stack", CONVERT,
           "cartpole-v1_old_stack_json_compressed.json", "--legacy-pickle"),
    data_refusal("json-pickle-runs-code", "json_compressed_pickle_runs_code",
                 CONVERT + " --legacy-pickle", "pickle-obs.json", "line 2", "'obs'", "mkdir"),
    # --- configuration files and arguments -----------------------------------------------------
    refuse("yaml-config-not-a-mapping", "yaml_config_not_a_mapping",
           PROCESS + " --config {tmp}/config.yaml", "config.yaml", "mapping"),
    refuse("config-unknown-section", "config_unknown_section",
           PROCESS + " --config {tmp}/config.yaml", "config.yaml", "sampling"),
    refuse("config-bad-value", "config_bad_value",
           PROCESS + " --config {tmp}/config.yaml", "config.yaml", "n_step"),
    refuse("config-invalid-json", "config_invalid_json",
           PROCESS + " --config {tmp}/config.json", "config.json", "line 1"),
    refuse("config-missing-file", "good_rows",
           PROCESS + " --config {tmp}/nope.yaml", "nope.yaml"),
    refuse("set-unknown-key", "good_rows", PROCESS + " --set n_stpe=3", "n_stpe", "n_step"),
    refuse("set-unknown-section", "good_rows", PROCESS + " --set bufer.kind=uniform",
           "bufer", "buffer"),
    refuse("set-without-equals", "good_rows", PROCESS + " --set n_step", "--set", "key=value"),
    refuse("set-negative-n-step", "good_rows", PROCESS + " --set n_step=-1", "n_step"),
    refuse("set-gamma-not-a-number", "good_rows", PROCESS + " --set gamma=abc", "gamma", "abc"),
    refuse("set-unknown-buffer-kind", "good_rows", PROCESS + " --set buffer.kind=nope",
           "kind", "nope", "prioritized"),
    refuse("set-limits-not-a-mapping", "good_rows", PROCESS + " --set read.limits=big",
           "limits", "big"),
    refuse("schema-unknown", "good_rows", PROCESS + " --schema nosuch", "nosuch", "d4rl"),
    refuse("schema-invalid-json", "schema_invalid_json",
           PROCESS + " --schema {tmp}/schema.json", "schema.json", "line 1"),
    refuse("format-unknown", "good_rows", PROCESS + " --format parquet", "--format", "parquet"),
    refuse("on-invalid-unknown", "good_rows", PROCESS + " --on-invalid ignore",
           "--on-invalid", "ignore"),
    refuse("out-missing", "good_rows", "process {in} --engine local", "--out"),
    refuse("prelearner-module-missing", "good_rows",
           PROCESS + " --prelearner no_such_pkg.mod:Cls", "no_such_pkg"),
    refuse("prelearner-without-colon", "good_rows", PROCESS + " --prelearner justaname",
           "prelearner", "justaname"),
    refuse("quarantine-without-dir", "good_rows", INSPECT + " --on-invalid quarantine",
           "--quarantine-dir"),
    refuse("quarantine-dir-is-a-file", "quarantine_dir_is_a_file",
           INSPECT + " --on-invalid quarantine --quarantine-dir {tmp}/q", "q'"),
    refuse("out-not-empty", "out_not_empty", PROCESS, "--out", "--overwrite"),
    refuse("out-parent-is-a-file", "out_parent_is_a_file",
           "process {in} --out {tmp}/blocker/out --engine local --json", "blocker"),
    # issue 20: hostile names and values ---------------------------------------------------------
    # Each costs one short line or is kept exactly; tests/test_hostile_values.py measures the
    # time and peak memory of the alias bomb and the huge train_batch_size in a subprocess.
    refuse("non-utf8-file-name-process", "non_utf8_file_name", PROCESS,
           "b'zz-bad\\xff\\xfe.parquet'", "not valid UTF-8", "rename"),
    refuse("non-utf8-file-name-inspect", "non_utf8_file_name", INSPECT,
           "b'zz-bad\\xff\\xfe.parquet'", "not valid UTF-8"),
    refuse("non-utf8-file-name-convert", "non_utf8_file_name", CONVERT,
           "b'zz-bad\\xff\\xfe.parquet'", "not valid UTF-8"),
    refuse("nul-eps-id-to-minari", "eps_id_with_nul", "convert {in} --to minari --out {out} --json",
           "episode 'ab\\x00cd'", "NUL", "--to rows"),
    accept("nul-eps-id-to-rows", "eps_id_with_nul", CONVERT,
           {"rows_in": 59, "rows_out": 59, "balanced": True}),
    accept("nul-eps-id-to-episodes", "eps_id_with_nul",
           "convert {in} --to episodes --out {out} --json",
           {"rows_in": 59, "episodes_written": 4}),
    accept("nul-eps-id-process", "eps_id_with_nul", PROCESS, {"rows_in": 59, "episodes_kept": 4}),
    data_refusal("megabyte-eps-id", "eps_id_of_a_megabyte", PROCESS,
                 "big-id.parquet", "'rewards'", "… (1048576 chars)", "t=5"),
    refuse("yaml-alias-bomb", "yaml_alias_bomb", PROCESS + " --config {tmp}/config.yaml",
           "config.yaml", "line 2, column", "10000", "alias bomb"),
    refuse("yaml-recursive-alias", "yaml_recursive_alias",
           PROCESS + " --config {tmp}/config.yaml", "config.yaml", "line 2, column 18", "*a"),
    refuse("config-too-large", "config_too_large", PROCESS + " --config {tmp}/config.yaml",
           "config.yaml", "1048576 bytes"),
    refuse("config-nested-too-deeply", "config_nested_too_deeply",
           PROCESS + " --config {tmp}/config.json", "config.json", "nested too deeply"),
    refuse("config-huge-train-batch-size", "config_huge_train_batch_size",
           PROCESS + " --config {tmp}/config.yaml", "config.yaml", "sample.train_batch_size",
           "[1, 4194304]", "1000000000000"),
    accept("config-read-section", "config_read_section", PROCESS + " --config {tmp}/config.yaml",
           {"rows_in": 59, "rows_rejected.*": 18, "rows_balance": True}),
    refuse("set-train-batch-size-10e12", "good_rows",
           PROCESS + " --set train_batch_size=1000000000000 --set sample_all=false",
           "sample.train_batch_size", "[1, 4194304]"),
    refuse("set-frame-stack-huge", "good_rows", PROCESS + " --set frame_stack=1000000000",
           "sample.frame_stack", "[1, 256]"),
    refuse("set-n-step-huge", "good_rows", PROCESS + " --set n_step=1000000000",
           "sample.n_step", "[1, 10000]"),
    refuse("set-n-step-range-huge", "good_rows", PROCESS + " --set 'n_step=[1,1000000000]'",
           "sample.n_step", "10000"),
    refuse("set-capacity-huge", "good_rows", PROCESS + " --set buffer.capacity=1000000000000",
           "buffer.capacity", "[2, 10000000000]"),
    refuse("set-ray-batch-size-huge", "good_rows", PROCESS + " --set ray.batch_size=10000000000",
           "ray.batch_size", "[1, 10000000]"),
    refuse("set-concurrency-huge", "good_rows", PROCESS + " --set concurrency=1000000000",
           "ray.concurrency", "[1, 10000]"),
    refuse("set-num-samples-huge", "good_rows", PROCESS + " --set num_samples=10000000000000",
           "sample.num_samples", "1000000000000"),
    refuse("set-limit-not-a-number", "good_rows",
           PROCESS + """ --set 'read.limits={"max_decompressed_bytes":"lots"}'""",
           "read.limits.max_decompressed_bytes", "'lots'"),
    refuse("set-limit-a-bool", "good_rows",
           PROCESS + """ --set 'read.limits={"max_array_bytes":true}'""",
           "read.limits.max_array_bytes", "True"),
    refuse("non-utf8-out", "good_rows", "process {in} --out {tmp}/out\udcff --engine local --json",
           "--out", "out\\xff'", "not valid UTF-8"),
    # issue 20: Parquet bombs ------------------------------------------------------------------
    # Refused from the footer before anything is decoded (tests/io/test_parquet_guard.py measures
    # each refusal's time and peak memory in a subprocess); counted per file under skip. Then
    # files of one input whose columns disagree: refused in planning, the same on both engines
    # (tests/io/test_parquet_guard.py runs these makers through --engine ray as well).
    data_refusal("parquet-dictionary-bomb", "parquet_dictionary_bomb", PROCESS,
                 "dictionary-bomb.parquet", "'eps_id'", "200,000 rows", "max_parquet_expansion"),
    data_refusal("parquet-page-bomb", "parquet_page_bomb", PROCESS,
                 "page-bomb.parquet", "'obs'", "max_parquet_expansion"),
    data_refusal("parquet-forged-row-count", "parquet_forged_row_count", PROCESS,
                 "forged-rows.parquet", "(5,000,000,000 rows)", "max_parquet_row_group_bytes"),
    data_refusal("parquet-footer-claims-rows", "parquet_footer_claims_rows", PROCESS,
                 "claims-rows.parquet", "claims 5000000000 rows", "hold 59"),
    refuse("parquet-page-bomb-inspect", "parquet_page_bomb", INSPECT_RAISE,
           "page-bomb.parquet", "'obs'", "max_parquet_expansion"),
    accept("parquet-dictionary-bomb-skipped", "parquet_dictionary_bomb", PROCESS_SKIP,
           {"rows_in": 0, "files_rejected": 1,
            "per_file[dictionary-bomb.parquet].error": contains("max_parquet_expansion")}),
    accept("parquet-forged-row-count-inspect", "parquet_forged_row_count", INSPECT,
           {"rows": 0, "per_file[forged-rows.parquet].error": contains("5,000,000,000 rows")}),
    refuse("drift-obs-shape", "drift_obs_shape", PROCESS,
           "'obs'", "(4,) in", "(5,) in", "a.parquet", "b.parquet"),
    refuse("drift-actions-int-string", "drift_actions_int_string", PROCESS,
           "'actions'", "int64 in", "string in", "a.parquet", "b.parquet"),
    accept("drift-rewards-float32", "drift_rewards_float32", PROCESS,
           {"rows_in": 976, "rows_balance": True, "files_rejected": 0}),
    accept("drift-rewards-int64", "drift_rewards_int64", PROCESS,
           {"rows_in": 976, "rows_balance": True, "files_rejected": 0}),
    # issue 36: the last hostile inputs --------------------------------------------------------
    # No hang (a FIFO is refused before it is opened, wherever its path comes from), no
    # traceback, no silent inf or merged id (docs/hostile_inputs.md says what each one does).
    refuse("manifest-lists-fifo-inspect", "manifest_lists_fifo", INSPECT,
           "zz-pipe.parquet", "not a regular file"),
    refuse("manifest-lists-fifo-process", "manifest_lists_fifo", PROCESS,
           "zz-pipe.parquet", "not a regular file"),
    refuse("fifo-named-directly", "fifo_named_directly", PROCESS,
           "pipe.parquet", "not a regular file"),
    refuse("fifo-in-folder", "fifo_in_folder", PROCESS,
           "zz-pipe.parquet", "not a regular file"),
    refuse("fifo-as-config", "fifo_as_config", PROCESS + " --config {tmp}/config.yaml",
           "config.yaml", "not a regular file"),
    refuse("parquet-duplicate-column", "parquet_duplicate_column", PROCESS,
           "twice.parquet", "'rewards'", "2 times"),
    refuse("parquet-duplicate-column-inspect", "parquet_duplicate_column", INSPECT_RAISE,
           "twice.parquet", "'rewards'", "2 times"),
    data_refusal("n-step-return-overflows", "rewards_near_float_max",
                 PROCESS + " --set n_step=3", "huge-rewards.parquet", "'rewards'", EP0, "t=0",
                 "not finite"),
    accept("n-step-return-overflows-skip", "rewards_near_float_max",
           PROCESS_SKIP + " --set n_step=3",
           {"rows_in": 59, "samples_nonfinite": 55, "samples_written": 4}),
    data_refusal("nan-obs", "nan_obs", PROCESS, "nan-obs.parquet", "'obs'", EP0, "t=0"),
    accept("nan-obs-skip", "nan_obs", PROCESS_SKIP,
           {"rows_in": 59, "rows_rejected.nan_obs": 18, "rows_balance": True}),
    data_refusal("inf-new-obs", "inf_new_obs", PROCESS, "inf-new-obs.parquet", "'obs'", EP0,
                 "t=18 (the last step's new_obs)", "non-finite"),
    data_refusal("nan-action", "nan_action", PROCESS, "nan-action.parquet", "'actions'", EP0,
                 "t=5"),
    accept("nan-action-skip", "nan_action", PROCESS_SKIP,
           {"rows_in": 59, "rows_rejected.nan_action": 18, "rows_balance": True}),
    refuse("minari-dataset-id-minari-refuses", "good_rows",
           "convert {in} --to minari --out {out} --json --dataset-id ../../../../evil/x-v0",
           "--dataset-id", "'../../../../evil/x-v0'"),
    refuse("renamed-column-in-one-file", "renamed_column_in_one_file", PROCESS,
           "b.parquet", "'rewards'", "'reward'"),
    data_refusal("ragged-list-of-lists-obs", "ragged_list_obs", PROCESS,
                 "ragged-obs.parquet", "'obs'", "row 41 has 3"),
    refuse("garbled-parquet-footer", "garbled_parquet_footer", PROCESS, "garbled.parquet"),
    refuse("json-lines-named-parquet", "json_lines_named_parquet", PROCESS,
           "lines.parquet", "JSON lines", ".json"),
    data_refusal("binary-eps-ids", "binary_eps_ids", PROCESS,
                 "binary-ids.parquet", "'eps_id'", "row 0", "not UTF-8", "b'\\xff1'"),
    accept("binary-eps-ids-skip", "binary_eps_ids", PROCESS_SKIP,
           {"rows_in": 59, "rows_rejected.bad_id": 59, "rows_balance": True}),
    data_refusal("episodes-is-terminated-text", "episodes_is_terminated_text", PROCESS,
                 "yes.parquet", "row 2", "is_terminated", "'yes'"),
    accept("episodes-is-terminated-text-skip", "episodes_is_terminated_text", PROCESS_SKIP,
           {"rows_in": 6, "rows_rejected.bad_episode_state": 1, "episodes_kept": 5}),
    accept("old-stack-corrupt-lz4-convert", "old_stack_corrupt_lz4",
           CONVERT + " --legacy-pickle --on-invalid skip",
           {"rows_in": 45, "rows_rejected.corrupt_lz4": 16, "records_rejected.corrupt_lz4": 1,
            "balanced": True}),
    accept("old-stack-corrupt-lz4-process", "old_stack_corrupt_lz4",
           PROCESS_SKIP + " --legacy-pickle",
           {"rows_in": 45, "rows_rejected.corrupt_lz4": 16, "rows_balance": True}),
    accept("set-limit-dotted", "good_rows",
           PROCESS + " --set read.limits.max_decompressed_bytes=1048576", {"rows_in": 59}),
    refuse("set-limit-dotted-zero", "good_rows",
           PROCESS + " --set read.limits.max_decompressed_bytes=0",
           "read.limits.max_decompressed_bytes", "[1, 1099511627776]", "found 0"),
]
# fmt: on


# ------------------------------------------------------------------------------------------------
# running a case
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str
    tmp: Path
    out_existed: bool

    @property
    def err_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.strip()]


_RESULTS: dict[str, Outcome] = {}


def _argv(case: Case, tmp: Path, path: Path) -> list[str]:
    subs = {"{in}": str(path), "{out}": str(tmp / "out"), "{tmp}": str(tmp)}
    out = []
    for word in shlex.split(case.cmd):
        for k, v in subs.items():
            word = word.replace(k, v)
        out.append(word)
    return out


def _run_in_process(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # as on the command line: printed, not raised
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:
            traceback.print_exc()  # what the interpreter prints for an uncaught error
            code = 1
    out, err = capfd.readouterr()
    return code, out, err


def _run_subprocess(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "offline_prelearner", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


def run_case(
    case: Case,
    tmp_path_factory: pytest.TempPathFactory,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Outcome:
    """Makes the input and runs the command once per session (the hint test reuses it)."""
    if case.id in _RESULTS:
        return _RESULTS[case.id]
    if case.needs_non_root and os.geteuid() == 0:
        pytest.skip("root reads a chmod 000 file")
    tmp = tmp_path_factory.mktemp("case")  # a neutral name: fragments must come from the message
    try:
        path = mc.MAKERS[case.make](tmp)
    except mc.SourceMissing as e:
        pytest.skip(str(e))
    out_existed = (tmp / "out").exists()
    argv = _argv(case, tmp, path)
    monkeypatch.setenv("RAY_DATA_LOG_LEVEL", "ERROR")  # what main sets; undone after the test
    if os.environ.get("CORPUS_SUBPROCESS"):
        code, out, err = _run_subprocess(argv, tmp)
    else:
        code, out, err = _run_in_process(argv, capfd)
    result = Outcome(code, out, err, tmp, out_existed)
    _RESULTS[case.id] = result
    return result


def lookup(doc: Any, key: str) -> Any:
    """A value by key path: ``a.b``; ``a.0`` indexes a list; ``a.*`` sums a dict of counts (0
    when empty); ``per_file[name].field`` picks the entry of list ``per_file`` whose ``file`` ends
    in ``name``."""
    cur = doc
    for part in re.findall(r"[^.\[]+\[[^\]]*\]|[^.]+", key):
        if part == "*":
            return sum(cur.values())
        if isinstance(cur, list) and part.isdigit():
            assert int(part) < len(cur), f"{key!r}: the list has {len(cur)} entries"
            cur = cur[int(part)]
            continue
        if "[" in part:
            name, _, sel = part[:-1].partition("[")
            entries = [e for e in cur.get(name) or [] if str(e.get("file", "")).endswith(sel)]
            assert len(entries) == 1, f"{name!r} has no single entry for {sel!r}: {cur.get(name)!r}"
            cur = entries[0]
            continue
        assert isinstance(cur, dict) and part in cur, f"no {part!r} in {key!r}"
        cur = cur[part]
    return cur


def _document(case: Case, res: Outcome) -> dict[str, Any]:
    if case.cmd.startswith("process"):
        return json.loads((res.tmp / "out" / "stats.json").read_text())
    return json.loads(res.out)


def _params(cases: list[Case], todo: Callable[[Case], str | None]) -> list[Any]:
    out = []
    for c in cases:
        reason = todo(c)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


# ------------------------------------------------------------------------------------------------
# tests
# ------------------------------------------------------------------------------------------------
def test_the_corpus_is_large_and_well_formed() -> None:
    assert len(CASES) >= 55
    assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
    assert all(c.make in mc.MAKERS for c in CASES)
    assert {c.make for c in CASES} == set(mc.MAKERS), "every maker is used by a case"
    for c in CASES:
        assert (c.exit == 0) == bool(c.counts) and (c.exit == 0) != bool(c.err), c.id
        assert c.todo is None or c.todo.startswith(("issue 13: ", "issue 36: ")), c.id


def test_lookup_reads_key_paths() -> None:
    """The key paths work, so an xfail on per_file fails for the missing listing, not a typo."""
    doc = {
        "rows_rejected": {"nan_reward": 18, "bad_type": 2},
        "files_unreadable": ["d/zz-cut.parquet"],
        "per_file": [
            {"file": "d/a.parquet", "rows_read": 10},
            {"file": "d/zz-empty.parquet", "rows_read": 0, "error": "0 bytes"},
        ],
    }
    assert lookup(doc, "rows_rejected.*") == 20
    assert lookup(doc, "files_unreadable.0") == "d/zz-cut.parquet"
    assert lookup(doc, "per_file[zz-empty.parquet].rows_read") == 0
    assert REFUSED.test(lookup(doc, "per_file[zz-empty.parquet].error"))
    assert lookup(doc, "per_file[a.parquet].rows_read") == 10
    with pytest.raises(AssertionError, match="no single entry"):
        lookup(doc, "per_file[b.parquet].rows_read")


@pytest.mark.parametrize("case", _params(CASES, lambda c: c.todo))
def test_case(
    case: Case,
    tmp_path_factory: pytest.TempPathFactory,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    res = run_case(case, tmp_path_factory, capfd, monkeypatch)
    shown = f"exit {res.code}\nstderr:\n{res.err}\nstdout:\n{res.out[:2000]}"
    assert not (res.tmp / mc.MARKER).exists(), "a pickle payload ran"
    assert res.code == case.exit, shown
    if case.exit == 0:
        assert res.err_lines == [], shown
        doc = _document(case, res)
        for key, want in case.counts.items():
            got = lookup(doc, key)
            ok = want.test(got) if isinstance(want, Check) else got == want
            assert ok, f"{key}: expected {want!r}, found {got!r}\n{shown}"
        return
    assert len(res.err_lines) == 1, f"stderr must be one line\n{shown}"
    line = res.err_lines[0]
    assert "Traceback" not in res.err
    missing = [frag for frag in case.err if frag not in line]
    assert not missing, f"missing {missing} in: {line}"
    if not res.out_existed:
        assert not (res.tmp / "out").exists(), "a refused job created --out"


@pytest.mark.parametrize(
    "case",
    _params([c for c in CASES if c.hint], lambda c: c.todo if c.hint_todo is None else c.hint_todo),
)
def test_refusal_says_what_to_do(
    case: Case,
    tmp_path_factory: pytest.TempPathFactory,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    res = run_case(case, tmp_path_factory, capfd, monkeypatch)
    assert res.code == case.exit and len(res.err_lines) == 1, res.err
    assert case.hint is not None and case.hint in res.err_lines[0], res.err_lines[0]

"""``stats.json`` and ``_manifest.json`` against the JSON Schemas the package ships (issue 31).

The schemas (``offline_prelearner/io/json_schemas/``, loaded with
:func:`~offline_prelearner.io.output_schema.output_schema`) describe what the writers write
today, key by key. Every test here validates *real* outputs, written by the commands a user runs:

* ``process`` on both engines, n-step 1 and 3, ``sample_all`` on and off, a sample cap, msgpack
  episodes, old-stack JSON lines and a D4RL file (input rows unknown), multi-agent rows;
* ``process --on-invalid skip`` over a bad file and bad rows, ``--on-invalid quarantine``;
* a job that failed on bad data, then ``--resume``\\d (units reused), on the local disk and on S3;
* ``process`` and ``convert`` into an object store (SeaweedFS's S3, Azurite's blob service;
  skipped with the reason where the server cannot start);
* ``convert`` by each of its writers (file by file, a whole dataset, a layout change), with
  records and rows refused and quarantined;
* ``record``, which writes data files only, and the conversion of what it wrote.

And the schemas bite: a real document with a required key taken out, a key added, a value of the
wrong type or outside its enum is refused, naming the place; every property is described and
every object whose keys the writer chooses is closed (``additionalProperties: false``), so a new
key without a schema update fails here.
"""

from __future__ import annotations

import copy
import functools
import json
import posixpath
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import REPO
from corpus import make_corpus as mc
from test_convert_matrix import _write_d4rl_source

from offline_prelearner import cli
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.io.output_schema import OUTPUT_KINDS, output_schema
from offline_prelearner.io.stores import locate
from offline_prelearner.testing.examples import example_episodes

jsonschema = pytest.importorskip("jsonschema")

ROWS = REPO / "datasets" / "cartpole-v1" / "rows"
EPISODES = REPO / "datasets" / "cartpole-v1" / "episodes"

#: Objects whose keys are not the job writer's to choose (the configs have their own checks:
#: ``PreLearnerConfig.from_dict``, ``ReadConfig``), left open in the schemas.
OPEN_OBJECTS = {
    ("process-stats", "config"),
    ("manifest", "config"),
    ("manifest", "read"),
}


# ============================================================================ helpers
@functools.cache
def validator(kind: str) -> Any:
    schema = output_schema(kind)  # type: ignore[arg-type]
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(kind: str, doc: Any) -> list[Any]:
    return sorted(validator(kind).iter_errors(doc), key=lambda e: list(e.absolute_path))


def assert_valid(kind: str, doc: Any, where: object = "") -> None:
    found = errors(kind, doc)
    assert not found, f"{where} is not a valid {kind}:\n" + "\n".join(
        f"  {e.json_path}: {e.message[:300]}" for e in found
    )


def cli_run(*argv: str | Path) -> None:
    """The command line, in this process (as tests/test_corpus.py runs it); exit 0 asserted."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # as on the command line: printed, not raised
        code = cli.main([str(a) for a in argv])
    assert code == 0, argv


def read_json(folder: Path | str, name: str) -> dict[str, Any]:
    if isinstance(folder, Path):
        doc: dict[str, Any] = json.loads((folder / name).read_text())
    else:
        doc = json.loads(locate(folder).join(name).read_bytes())
    return doc


def check_process(out: Path | str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A process output's stats.json and manifest, both valid; what the schemas leave open (the
    config) checked by the config itself; the two documents agree."""
    stats, manifest = read_json(out, "stats.json"), read_json(out, "_manifest.json")
    assert_valid("process-stats", stats, out)
    assert_valid("manifest", manifest, out)
    assert manifest["content"] == "samples"
    assert PreLearnerConfig.from_dict(stats["config"]).to_dict() == stats["config"]
    assert manifest["config"] == stats["config"]
    assert manifest["samples_written"] == stats["samples_written"]
    assert manifest["engine"] == stats["engine"] and manifest["format"] == stats["format"]
    assert [f["path"] for f in manifest["inputs"]] == [f["file"] for f in stats["per_file"]]
    return stats, manifest


def check_convert(out: Path | str) -> tuple[dict[str, Any], dict[str, Any]]:
    stats, manifest = read_json(out, "stats.json"), read_json(out, "_manifest.json")
    assert_valid("convert-stats", stats, out)
    assert_valid("manifest", manifest, out)
    assert manifest["content"] == "dataset" and manifest["to"] == stats["to"]
    assert manifest.get("layout") == stats.get("layout")
    under = manifest["files_dir"]  # files_written: paths under the output
    assert [posixpath.join(under, f["name"]) for f in manifest["files"]] == stats["files_written"]
    assert stats["out_dir"] == str(out)  # on a store its URI, not the local folder converted into
    return stats, manifest


def with_bad_rows(d: Path) -> Path:
    """The shipped rows plus a file whose first episode has a NaN reward (its own episodes)."""
    return mc.nan_reward_among_good(d)


# ============================================================================ the schemas
@pytest.mark.parametrize("kind", OUTPUT_KINDS)
def test_each_schema_is_draft_2020_12_described_and_closed(kind: str) -> None:
    schema = output_schema(kind)  # type: ignore[arg-type]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)

    def described(sub: dict[str, Any]) -> bool:
        while "description" not in sub and sub.get("$ref", "").startswith("#/"):
            sub = functools.reduce(lambda node, key: node[key], sub["$ref"][2:].split("/"), schema)
        return "description" in sub

    declared = 0

    def walk(node: Any) -> None:
        nonlocal declared
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") == "object" and "properties" in node:  # a declaration, not a rule
            declared += 1
            assert node.get("additionalProperties") is False, sorted(node["properties"])
            for name, sub in node["properties"].items():
                assert described(sub), f"{kind}: property {name!r} has no description"
                if sub.get("type") == "object" and "properties" not in sub:
                    assert (kind, name) in OPEN_OBJECTS, f"{kind}: {name!r} is an open object"
        for value in node.values():
            walk(value)

    walk(schema)
    assert declared >= 3


def _property_names(node: Any) -> Iterator[str]:
    if isinstance(node, list):
        for item in node:
            yield from _property_names(item)
    elif isinstance(node, dict):
        if node.get("type") == "object":
            yield from node.get("properties", {})
        for value in node.values():
            yield from _property_names(value)


def test_docs_outputs_names_every_key_and_every_schema() -> None:
    """docs/OUTPUTS.md says in prose what the schemas say: a key added to a schema without a
    word there fails here. It names each schema's file (as code: the site links only pages)."""
    doc = (REPO / "docs" / "OUTPUTS.md").read_text()
    for kind in OUTPUT_KINDS:
        assert f"`offline_prelearner/io/json_schemas/{kind}.schema.json`" in doc
        assert (
            REPO / "offline_prelearner" / "io" / "json_schemas" / f"{kind}.schema.json"
        ).is_file()
        names = set(_property_names(output_schema(kind)))
        missing = sorted(n for n in names if f"`{n}`" not in doc)
        assert not missing, f"docs/OUTPUTS.md does not name these keys of {kind}: {missing}"


def test_output_schema_names_its_kinds() -> None:
    assert OUTPUT_KINDS == ("process-stats", "convert-stats", "manifest")
    first = output_schema("manifest")
    first["required"].clear()  # a new dict each call: the caller's to change
    assert output_schema("manifest")["required"]
    with pytest.raises(ValueError, match="'process-stats', 'convert-stats', 'manifest'"):
        output_schema("stats")  # type: ignore[arg-type]


# ============================================================================ process, local disk
PROCESS_CASES = {
    "n1-sample-all": (ROWS, ()),
    "n3-replay": (ROWS, ("--set", "n_step=3", "--set", "sample_all=false")),
    "n3-sample-all-capped": (ROWS, ("--set", "n_step=3", "--set", "num_samples=100")),
    "msgpack-episodes": (EPISODES, ("--set", "sample_all=false")),
}


@pytest.mark.parametrize("case", PROCESS_CASES)
def test_process_outputs_are_valid(case: str, tmp_path: Path) -> None:
    data, extra = PROCESS_CASES[case]
    out = tmp_path / "out"
    cli_run("process", data, "--out", out, "--engine", "local", "--json", *extra)
    stats, manifest = check_process(out)
    assert stats["engine"] == "local" and "ray_cluster" not in stats
    assert manifest["files_dir"] == "samples" and manifest["files"]
    assert stats["rows_in"] > 0 and stats["rows_balance"]
    if case == "n3-sample-all-capped":
        assert stats["samples_written"] == 100 < stats["samples"]


def test_process_of_old_stack_json_lines_is_valid(tmp_path: Path) -> None:
    """Old-stack JSON lines: the footer-less input's ``rows`` is null in the manifest."""
    data = mc.old_stack_good(tmp_path)
    out = tmp_path / "out"
    cli_run("process", data, "--out", out, "--engine", "local", "--json")
    stats, manifest = check_process(out)
    assert stats["format"] == "sample_batches"
    assert [f["rows"] for f in manifest["inputs"]] == [None]


def test_process_of_a_d4rl_file_is_valid(tmp_path: Path) -> None:
    data = _write_d4rl_source(tmp_path / "d4rl.hdf5", example_episodes(8, fragment=False))
    out = tmp_path / "out"
    cli_run("process", data, "--out", out, "--engine", "local", "--json")
    stats, manifest = check_process(out)
    assert stats["format"] == "d4rl" and stats["episodes_kept"] == 8
    assert [f["rows"] for f in manifest["inputs"]] == [None]


def test_process_of_multi_agent_rows_is_valid(tmp_path: Path) -> None:
    eps = example_episodes(12, fragment=False)
    for i, ep in enumerate(eps):
        ep.id, ep.agent_id, ep.module_id = f"ep{i // 2}", f"agent{i % 2}", f"module{i % 2}"
    data = tmp_path / "rows"
    data.mkdir()
    pq.write_table(episodes_to_rows(eps), data / "multi-agent.parquet")
    out = tmp_path / "out"
    cli_run("process", data, "--out", out, "--engine", "local", "--json",
            "--set", "sample_all=false", "--set", "train_batch_size=8")  # fmt: skip
    stats, _ = check_process(out)
    assert stats["episodes_kept"] == 12 and stats["samples_written"] > 0


@pytest.mark.ray
def test_process_on_ray_is_valid(ray_local: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli_run("process", ROWS, "--out", out, "--engine", "ray", "--json", "--set", "n_step=3")
    stats, manifest = check_process(out)
    assert stats["engine"] == manifest["engine"] == "ray"
    assert stats["ray_cluster"]["nodes"] >= 1
    assert all(isinstance(n["ray_node_id"], str) for n in stats["nodes"])


def test_skip_with_a_bad_file_and_bad_rows_is_valid(tmp_path: Path) -> None:
    """``--on-invalid skip``: rows refused by reason, and a file the reader cannot take listed
    with its error."""
    data = with_bad_rows(tmp_path)
    raw = (data / "cartpole-v1-rows-00004.parquet").read_bytes()
    (data / "zz-cut.parquet").write_bytes(raw[:-100])  # not Parquet any more
    out = tmp_path / "out"
    cli_run("process", data, "--out", out, "--engine", "local", "--json", "--on-invalid", "skip")
    stats, manifest = check_process(out)
    assert stats["rows_rejected"] and stats["episodes_rejected"]
    assert stats["files_rejected"] == 1
    (bad,) = [f for f in stats["per_file"] if f["error"] is not None]
    assert bad["file"].endswith("zz-cut.parquet")
    assert manifest["quarantine"] == [] and stats["quarantine_files"] == []


def test_quarantine_is_valid(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cli_run("process", with_bad_rows(tmp_path), "--out", out, "--engine", "local", "--json",
            "--on-invalid", "quarantine")  # fmt: skip
    stats, manifest = check_process(out)
    (q,) = manifest["quarantine"]
    assert stats["quarantine_files"] == [str(out / q["name"])]
    assert stats["rows_quarantined"] == q["rows"] == sum(stats["rows_rejected"].values()) > 0


def _fail_then_resume(data: Path, out: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job that stops on bad data in its last unit (``--on-invalid raise``), the bad file
    removed, then ``--resume``: the units finished before are reused."""
    monkeypatch.setenv("OFFLINE_PRELEARNER_UNIT_MIN_ROWS", "1000")  # a unit per shipped file
    argv = ["process", str(data), "--out", str(out), "--engine", "local", "--json"]
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert cli.main(argv) == 2
    (data / "zz-nan.parquet").unlink()
    cli_run(*argv, "--resume")


def test_resumed_job_is_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    _fail_then_resume(with_bad_rows(tmp_path), out, monkeypatch)
    stats, _ = check_process(out)
    assert stats["units_reused"] == 5 == stats["units"]


# ============================================================================ object stores
@pytest.fixture(params=["s3_store", "azure_store"])
def store(request: pytest.FixtureRequest) -> str:
    """A fresh prefix on a real store server (skipped, with the reason, if it cannot start)."""
    prefix: str = request.getfixturevalue(request.param)
    return prefix


def test_process_into_a_store_is_valid(store: str, tmp_path: Path) -> None:
    out = f"{store}/out"
    cli_run("process", with_bad_rows(tmp_path), "--out", out, "--engine", "local", "--json",
            "--on-invalid", "quarantine")  # fmt: skip
    stats, manifest = check_process(out)
    (q,) = manifest["quarantine"]
    assert q["name"].startswith(f"quarantine/quarantine-{manifest['job_id']}-")
    assert stats["quarantine_files"] == [f"{out}/{q['name']}"]


def test_resumed_job_on_s3_is_valid(
    s3_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = f"{s3_store}/out"
    _fail_then_resume(with_bad_rows(tmp_path), out, monkeypatch)
    stats, _ = check_process(out)
    assert stats["units_reused"] == 5 == stats["units"]


def test_convert_into_a_store_is_valid(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Minari's fixed names (under a folder named by the job) and a file-by-file conversion
    that quarantines (its files and quarantine file renamed with the job's id)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the local twins' folder
    out = f"{store}/minari"
    cli_run("convert", ROWS, "--to", "minari", "--env-id", "CartPole-v1", "--out", out, "--json")
    stats, manifest = check_convert(out)
    assert manifest["files_dir"] == manifest["job_id"]  # Minari's fixed names, in a job's folder
    assert stats["dataset_id"] is not None

    out = f"{store}/episodes"
    gap = tmp_path / "gap"
    gap.mkdir()
    cli_run("convert", mc.t_gap(gap), "--to", "episodes", "--out", out, "--json",
            "--on-invalid", "quarantine")  # fmt: skip
    stats, manifest = check_convert(out)
    (q,) = manifest["quarantine"]
    assert manifest["files_dir"] == "episodes" and manifest["job_id"] in q["name"]
    assert stats["quarantine_file"] == f"{out}/{q['name']}"  # where the store holds it


# ============================================================================ convert
@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Each convert writer's output, once for the module: name -> committed folder."""
    root = tmp_path_factory.mktemp("convert")
    outs: dict[str, Path] = {}

    def convert(name: str, data: Path, to: str, *extra: str) -> None:
        outs[name] = root / name
        cli_run("convert", data, "--to", to, "--out", outs[name], "--json", *extra)

    convert("rows-to-episodes", ROWS, "episodes")
    convert("episodes-to-rows", outs["rows-to-episodes"], "rows")
    convert("rows-relayout", ROWS, "rows", "--layout", "fast")
    convert("rows-to-minari", ROWS, "minari", "--env-id", "CartPole-v1")
    convert("minari-to-rows", outs["rows-to-minari"], "rows")
    (root / "old").mkdir()
    old = mc.json_non_object_line(root / "old")
    convert("old-stack-skip", old, "rows", "--on-invalid", "skip")
    d4rl = _write_d4rl_source(root / "cartpole.hdf5", example_episodes(8, fragment=False))
    convert("d4rl-to-episodes", d4rl, "episodes")
    (root / "gap").mkdir()
    convert("t-gap-quarantine", mc.t_gap(root / "gap"), "episodes", "--on-invalid", "quarantine")
    yield outs
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    "name, writer",
    [
        ("rows-to-episodes", "per_file"),
        ("episodes-to-rows", "per_file"),
        ("rows-relayout", "input_files"),
        ("rows-to-minari", "dataset_id"),
        ("minari-to-rows", "dataset_id"),
        ("d4rl-to-episodes", "dataset_id"),
        ("old-stack-skip", "per_file"),
        ("t-gap-quarantine", "per_file"),
    ],
)
def test_convert_outputs_are_valid(converted: dict[str, Path], name: str, writer: str) -> None:
    stats, manifest = check_convert(converted[name])
    assert writer in stats  # the writer this case is meant to exercise
    if name == "old-stack-skip":
        assert stats["records_rejected"] and stats["records_read"] > 0
    if name == "t-gap-quarantine":
        (q,) = manifest["quarantine"]
        assert q["kind"] == "quarantine" and stats["quarantine_file"] is not None
        assert stats["rows_rejected"]


def test_record_writes_data_only_and_its_conversion_is_valid(tmp_path: Path) -> None:
    """``record`` writes its Parquet files and nothing beside them (no stats.json, no manifest:
    nothing to validate; if it starts writing them, validate them here); what it wrote converts
    into a valid output."""
    rec = tmp_path / "rec"
    cli_run("record", "CartPole-v1", "--steps", "300", "--out", rec, "--json")
    assert sorted(p.name for p in rec.iterdir()) == ["cartpole-v1-rows-00000.parquet"]
    out = tmp_path / "episodes"
    cli_run("convert", rec, "--to", "episodes", "--out", out, "--json")
    stats, _ = check_convert(out)
    assert stats["rows_in"] == 300 and stats["balanced"]


# ============================================================================ the schemas bite
@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One real document of each kind (a quarantining process job, a conversion to rows)."""
    root = tmp_path_factory.mktemp("real")
    data = with_bad_rows(root)
    cli_run("process", data, "--out", root / "p", "--engine", "local", "--json",
            "--on-invalid", "quarantine")  # fmt: skip
    cli_run("convert", ROWS, "--to", "rows", "--layout", "fast", "--out", root / "c", "--json")
    cli_run("convert", ROWS, "--to", "episodes", "--out", root / "e", "--json")
    return {
        "process-stats": read_json(root / "p", "stats.json"),
        "manifest": read_json(root / "p", "_manifest.json"),
        "convert-stats": read_json(root / "e", "stats.json"),
        "convert-manifest": read_json(root / "c", "_manifest.json"),
        "episodes-manifest": read_json(root / "e", "_manifest.json"),
    }


def _drop(key: str) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        *path, last = key.split(".")
        node: Any = doc
        for k in path:
            node = node[int(k)] if k.isdigit() else node[k]
        del node[last]

    return edit


def _set(key: str, value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        *path, last = key.split(".")
        node: Any = doc
        for k in path:
            node = node[int(k)] if k.isdigit() else node[k]
        node[int(last) if last.isdigit() else last] = value

    return edit


#: (document, edit, the JSON path of the error, the keyword that refuses it)
BREAKS = {
    "stats-missing-rows_in": ("process-stats", _drop("rows_in"), "$", "required"),
    "stats-missing-phases.units": ("process-stats", _drop("phases.units"), "$.phases", "required"),
    "stats-new-key": ("process-stats", _set("rows_lost", 0), "$", "additionalProperties"),
    "stats-new-per-file-key": (
        "process-stats", _set("per_file.0.bytes", 10), "$.per_file[0]", "additionalProperties",
    ),
    "stats-rows_in-as-text": ("process-stats", _set("rows_in", "5034"), "$.rows_in", "type"),
    "stats-rows_in-fractional": ("process-stats", _set("rows_in", 5034.5), "$.rows_in", "type"),
    "stats-reason-count-as-text": (
        "process-stats", _set("rows_rejected.nan_reward", "7"), "$.rows_rejected.nan_reward",
        "type",
    ),
    "stats-engine-auto": ("process-stats", _set("engine", "auto"), "$.engine", "enum"),
    "stats-ray-without-cluster": ("process-stats", _set("engine", "ray"), "$", "required"),
    "stats-local-with-a-cluster": (
        "process-stats", _set("ray_cluster", {"address": "a:1", "nodes": 1, "cpus": 1}),
        "$.ray_cluster", "not",
    ),
    "stats-format-auto": ("process-stats", _set("format", "auto"), "$.format", "not"),
    "manifest-missing-files": ("manifest", _drop("files"), "$", "required"),
    "manifest-missing-quarantine": ("manifest", _drop("quarantine"), "$", "required"),
    "manifest-new-key": ("manifest", _set("written_by", "me"), "$", "additionalProperties"),
    "manifest-file-without-sha256": ("manifest", _drop("files.0.sha256"), "$.files[0]", "required"),
    "manifest-sha256-not-hex": ("manifest", _set("files.0.sha256", "x" * 64), "$.files[0].sha256",
                                "pattern"),
    "manifest-rows-as-text": ("manifest", _set("files.0.rows", "12"), "$.files[0].rows", "type"),
    "manifest-incomplete": ("manifest", _set("complete", False), "$.complete", "const"),
    "manifest-content-unknown": ("manifest", _set("content", "other"), "$.content", "enum"),
    "manifest-samples-with-to": ("manifest", _set("to", "rows"), "$.to", "not"),
    "manifest-file-outside": ("manifest", _set("files.0.name", "../x.parquet"), "$.files[0].name",
                              "not"),
    "manifest-job-id-free-text": ("manifest", _set("job_id", "job-1"), "$.job_id", "pattern"),
    "convert-missing-balanced": ("convert-stats", _drop("balanced"), "$", "required"),
    "convert-new-key": ("convert-stats", _set("files_out", 5), "$", "additionalProperties"),
    "convert-layout-for-episodes": ("convert-stats", _set("layout", "fast"), "$.layout", "not"),
    "convert-to-unknown": ("convert-stats", _set("to", "csv"), "$.to", "enum"),
    "convert-manifest-without-layout": ("convert-manifest", _drop("layout"), "$", "required"),
    "convert-manifest-with-prelearner": (
        "convert-manifest", _set("prelearner", "a:B"), "$.prelearner", "const",
    ),
    "convert-manifest-layout-change-quarantine": (
        "convert-manifest", _set("quarantine", []), "$.quarantine", "not",
    ),
    "convert-manifest-layout-change-config-fragments": (
        "convert-manifest", _set("config.fragments", "keep"), "$.config", "maxProperties",
    ),
    "episodes-manifest-without-quarantine": (
        "episodes-manifest", _drop("quarantine"), "$", "required",
    ),
    "episodes-manifest-config-without-dones": (
        "episodes-manifest", _drop("config.dones"), "$.config", "required",
    ),
    "episodes-manifest-input-rows": (
        "episodes-manifest", _set("inputs.0.rows", 1000), "$.inputs[0].rows", "not",
    ),
    "convert-manifest-config-new-key": (
        "convert-manifest", _set("config.speed", 2), "$.config", "additionalProperties",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", BREAKS)
def test_a_broken_real_document_is_refused(real: dict[str, dict[str, Any]], case: str) -> None:
    name, edit, path, keyword = BREAKS[case]
    kind = "manifest" if name.endswith("manifest") else name
    doc = copy.deepcopy(real[name])
    assert_valid(kind, doc, name)  # the real document, as written
    edit(doc)
    found = {(e.json_path, e.validator) for e in _leaves(errors(kind, doc))}
    assert (path, keyword) in found, found


def _leaves(errs: list[Any]) -> Iterator[Any]:
    """The errors and, under an ``if``/``then`` or ``$ref``, the errors that caused them."""
    for e in errs:
        yield e
        yield from _leaves(list(e.context or []))


#: Edits that keep a real document valid: what the writers may also write.
STILL_VALID = {
    "stats-before-the-commit-was-timed": (
        "process-stats", _set("phases.commit", None), _set("phases.stop", None),
    ),
    "stats-no-time-measured": (
        "process-stats", _set("rows_per_second", None), _set("samples_per_second", None),
    ),
    "stats-rows-held": ("process-stats", _set("rows_held", 3)),
    "stats-ray": (
        "process-stats", _set("engine", "ray"),
        _set("ray_cluster", {"address": "10.0.0.1:6379", "nodes": 2, "cpus": 16.0}),
    ),
    "manifest-without-timezone": ("manifest", _set("committed_at", "2026-01-01T12:00:00")),
}  # fmt: skip


@pytest.mark.parametrize("case", STILL_VALID)
def test_documented_variants_of_a_real_document_are_valid(
    real: dict[str, dict[str, Any]], case: str
) -> None:
    name, *edits = STILL_VALID[case]
    doc = copy.deepcopy(real[name])
    for edit in edits:
        edit(doc)
    assert_valid(name, doc, case)

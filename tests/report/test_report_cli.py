"""``offline-prelearner report`` on real datasets of every kind: the page's summary is
``inspect --json``'s, the page fetches nothing, bad input is one line, ``--png`` writes PNGs."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO, episodes_to_columns, make_episode, to_table
from fixtures import sessions

from offline_prelearner.cli import main
from offline_prelearner.report.numbers import human

CARTPOLE = REPO / "datasets" / "cartpole-v1" / "rows"
#: A page may name these (the SVG namespaces vega writes, inside the inlined bundle); nothing
#: it loads is a URL.
NAMESPACES = ("http://www.w3.org/",)


@pytest.fixture(scope="module")
def minari_cases(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return sessions.minari_cases(tmp_path_factory)


@pytest.fixture(scope="module")
def d4rl_cases(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return sessions.d4rl_cases(tmp_path_factory)


def _inspect(path: Path | str, *args: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["inspect", str(path), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _report(path: Path | str, out: Path, *args: str) -> int:
    return main(["report", str(path), "--out", str(out), *args])


def _dl(page: str, dl_id: str) -> list[tuple[str, str, str]]:
    """``(key, data-value, text)`` of each ``<dd>`` of ``<dl id=dl_id>``."""
    block = re.search(rf'<dl id="{dl_id}">(.*?)</dl>', page, re.S)
    assert block, dl_id
    found = re.findall(r'<dd data-key="([^"]+)"(?: data-value="([^"]*)")?>([^<]*)</dd>', block[1])
    return [(html.unescape(k), html.unescape(v), html.unescape(t)) for k, v, t in found]


def _summary(page: str) -> dict[str, str]:
    """The summary's exact values (``data-value``)."""
    return {k: v for k, v, _ in _dl(page, "summary")}


def _card(page: str) -> dict[str, str]:
    return {k: t for k, _, t in _dl(page, "dataset-card")}


def _bad_rows(page: str, table_id: str) -> list[str]:
    """The first cell of each highlighted row of a table."""
    block = re.search(rf'<table id="{table_id}"[^>]*>(.*?)</table>', page, re.S)
    return [html.unescape(c) for c in re.findall(r"<tr class=bad><td>([^<]*)</td>", block[1])]


def _anomalies(page: str) -> list[tuple[str, list[str]]]:
    """``(sentence, table rows it names)`` of each anomaly."""
    items = re.findall(r'<li data-cells="([^"]*)">([^<]*)</li>', page)
    return [(html.unescape(t), json.loads(html.unescape(c))) for c, t in items]


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_page(page_file: Path, inspected: dict[str, Any]) -> str:
    """The page's contract, and its summary against ``inspect --json``'s dict."""
    page = page_file.read_text()
    summary = _summary(page)
    flat = _flat({k: v for k, v in inspected.items() if k not in ("per_file", "episode_stats")})
    for key in ("format", "files", "rows", "episodes", "terminated", "truncated", "not_done",
                "timesteps", "duplicates", "duplicate_rows", "seconds"):  # fmt: skip
        assert key in summary, key
    for key, value, text in _dl(page, "summary"):
        assert key in flat, f"{key} is not a key of inspect --json"
        if key == "seconds":  # its own run's time
            assert float(value) > 0
            continue
        expected = flat[key] if isinstance(flat[key], str) else json.dumps(flat[key])
        assert value == expected, key
        assert text == (flat[key] if isinstance(flat[key], str) else human(flat[key])), key
    # One meaning of "rows": the files table adds up to the summary.
    assert sum(f["rows_read"] for f in inspected["per_file"]) == inspected["rows"]
    # Rounded numbers: 4 significant digits at most shown, and in a chart's data.
    shown = re.sub(r"<script\b[^>]*>.*?</script>", "", page, flags=re.S)
    shown = re.sub(r'data-value="[^"]*"', "", shown)
    shown = re.sub(r"<p class=\"path\">.*?</p>|<title>.*?</title>", "", shown)  # paths as given
    for text in (shown, re.search(r'id="report-specs">(.*?)</script>', page, re.S).group(1)):
        long = [x for x in re.findall(r"\d+\.\d+", text) if len(x.replace(".", "").lstrip("0")) > 4]
        assert not long, long[:5]
    # Every highlighted row is named by an anomaly (and every named row is highlighted).
    named = {cell for _, cells in _anomalies(page) for cell in cells}
    assert set(_bad_rows(page, "observation-stats")) | set(_bad_rows(page, "per-file")) == named
    assert len(_anomalies(page)) == page.count("<li ")
    for reason in inspected["rejected"]:
        assert f"rejected.{reason}" in summary
    # Self-contained: no script, style, image or frame loaded from anywhere.
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", page, flags=re.S)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=\"(?!data:)", markup)
    assert page.count("<script") == markup.count("<script") == 3  # specs, bundle, ours
    assert not re.search(r"jsdelivr|unpkg|cdnjs|googleapis", page)
    card = re.sub(r'<dl id="dataset-card">.*?</dl>', "", page, flags=re.S)  # text, not loaded
    urls = set(re.findall(r"https?://[^\s\"'`)<]+", card))
    assert all(
        u.startswith(NAMESPACES) or "vega.github.io" in u or "github.com/vega" in u for u in urls
    ), urls  # fmt: skip  (names inside the bundle, never fetched)
    assert re.search(r'<ul id="anomalies">', page) and '<table id="per-file">' in page
    assert "window.reportReady = true" in page and "window.reportFailure" in page
    charts = re.findall(r'<div class="chart" data-chart="([^"]+)"(?: data-marks="(\d+)")?>', page)
    assert charts and len({c for c, _ in charts}) == len(charts)
    specs = json.loads(re.search(r'id="report-specs">(.*?)</script>', page, re.S).group(1))
    assert set(specs) == {c for c, _ in charts}
    for name, marks in charts:
        assert int(marks) == len(specs[name]["data"]["values"]), name
    return page


def test_shipped_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "cp.html"
    assert _report(CARTPOLE, out) == 0
    assert "wrote" in capsys.readouterr().out
    page = check_page(out, _inspect(CARTPOLE, capsys=capsys))
    for name in ("episode_length", "episode_return", "return_by_episode", "actions", "obs_0",
                 "reward_step", "reward_episode"):  # fmt: skip
        assert f'data-chart="{name}"' in page
    assert _summary(page)["episodes"] == "222"
    assert ("every reward is 1", ["rewards"]) in _anomalies(page)
    assert re.search(r'<dd data-key="length.mean" data-value="22.52252252252252">22.52</dd>', page)
    assert _card(page) == {  # no metadata: the spaces read
        "observation_space": "float32 (4,) (read; none declared)",
        "action_space": "int64 scalar (read; none declared)",
    }
    # 222 episodes: one point each; CartPole's two actions: two bars.
    assert 'data-chart="return_by_episode" data-marks="222"' in page
    assert 'data-chart="actions" data-marks="2"' in page


def test_rllib_written_files(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("cartpole-v1_rows_uncompressed.parquet", "cartpole-v1_episodes_msgpack.parquet",
                 "cartpole-v1_old_stack_json_uncompressed.json"):  # fmt: skip
        out = tmp_path / f"{name}.html"
        assert _report(shared_data / name, out) == 0
        check_page(out, _inspect(shared_data / name, capsys=capsys))


def test_minari_datasets(
    minari_cases: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("cartpole/random-v0@hdf5", "goal/dict-v0@arrow", "images/dict-v0@parquet"):
        case = minari_cases[name]
        out = tmp_path / f"{name.replace('/', '_')}.html"
        assert _report(case.path, out) == 0
        page = check_page(out, _inspect(case.path, capsys=capsys))
        assert _summary(page)["format"] == "minari"
        if name.startswith("images"):  # a strip of sample frames, PNGs inline
            strip = re.search(r'<div class="frames" data-leaf="obs.pixels">(.*?)</div>', page)
            assert strip and strip.group(1).count('src="data:image/png;base64,') >= 2
        if name.startswith("cartpole"):  # Discrete(2) declared: out-of-space counted, 0
            assert re.search(r"<td>obs\[0\]</td>(<td>[^<]*</td>){8}<td>0</td>", page)
        # The card leads with what `minari show` leads with.
        meta = json.loads((case.path / "data" / "metadata.json").read_text())
        card = _card(page)
        assert card["dataset_id"] == meta["dataset_id"] == name.split("@")[0]
        assert card["algorithm"] == meta["algorithm_name"]
        assert card["author"] == ", ".join(meta["author"])
        assert card["description"] == meta["description"]
        if name.startswith("cartpole"):  # recorded from an environment: its spec
            env = json.loads(meta["env_spec"])
            assert card["env_id"] == env["id"] == "CartPole-v1"
            assert card["max_episode_steps"] == str(env["max_episode_steps"])
        assert card["total_steps"] == f"{meta['total_steps']:,}"
        assert card["observation_space"].startswith(("Box(", "Dict("))
        assert card["action_space"].startswith(("Discrete(", "Box("))
        # One meaning of rows: Minari's steps, in the summary and the files table alike.
        assert _summary(page)["rows"] == str(meta["total_steps"])


def test_d4rl_files(d4rl_cases: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = d4rl_cases["d4rl_open_end"]
    out = tmp_path / "d4rl.html"
    assert _report(case.path, out) == 0
    inspected = _inspect(case.path, capsys=capsys)
    page = check_page(out, inspected)
    assert inspected["rejected"]  # the open end: rejected, counted, said at the top
    assert re.search(r"<li[^>]*>\d+ rows? rejected: not_done", page)
    assert 'data-chart="actions_0"' in page and 'data-chart="actions_1"' in page
    # --allow-fragments, as inspect takes it: the open episode kept, never ended
    out2 = tmp_path / "d4rl-fragments.html"
    assert _report(case.path, out2, "--allow-fragments") == 0
    page2 = check_page(out2, _inspect(case.path, "--allow-fragments", capsys=capsys))
    assert "episode ends without a done flag" in page2 or "episodes end without" in page2


def test_multi_agent_rows_per_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    eps = [make_episode(4 + i % 3, id=i // 2, agent_id=f"a{i % 2}", seed=i) for i in range(12)]
    data = tmp_path / "ma"
    data.mkdir()
    pq.write_table(to_table(episodes_to_columns(eps)), data / "part-0.parquet")
    out = tmp_path / "ma.html"
    assert _report(data, out) == 0
    page = check_page(out, _inspect(data, capsys=capsys))
    assert 'data-chart="episodes_by_module" data-marks="2"' in page
    specs_by = json.loads(re.search(r'id="report-specs">(.*?)</script>', page, re.S).group(1))
    stacked = specs_by["episode_length"]["data"]["values"]  # one bar per (length, agent)
    assert {v["group"] for v in stacked} == {"a0", "a1"} and sum(v["count"] for v in stacked) == 12
    specs = json.loads(re.search(r'id="report-specs">(.*?)</script>', page, re.S).group(1))
    groups = {v["group"] for v in specs["return_by_episode"]["data"]["values"]}
    assert groups == {"a0", "a1"}


def test_a_committed_output_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from offline_prelearner import convert_path

    folder = tmp_path / "episodes"
    convert_path(CARTPOLE, "episodes", folder)
    assert (folder / "_manifest.json").is_file()
    out = tmp_path / "committed.html"
    assert _report(folder, out) == 0
    page = check_page(out, _inspect(folder, capsys=capsys))
    assert _summary(page)["episodes"] == "222"


def test_png_writes_each_chart(tmp_path: Path) -> None:
    pngs = tmp_path / "png"
    assert _report(CARTPOLE, tmp_path / "r.html", "--png", str(pngs)) == 0
    names = re.findall(r'data-chart="([^"]+)"', (tmp_path / "r.html").read_text())
    assert sorted(p.stem for p in pngs.iterdir()) == sorted(names)
    for p in pngs.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _report(tmp_path / "absent", tmp_path / "x.html") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("offline-prelearner report: error: no data files") and "\n" not in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "part-0.parquet").write_bytes(b"PAR1 not parquet at all")
    assert _report(bad, tmp_path / "x.html", "--on-invalid", "raise") == 2
    err = capsys.readouterr().err.strip()
    assert "part-0.parquet" in err and "\n" not in err
    assert not (tmp_path / "x.html").exists()
    # Skipped instead (a good file first, so the format is detected): the page says which file.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    good = sorted(CARTPOLE.glob("*.parquet"))[0]
    (mixed / "part-0.parquet").write_bytes(good.read_bytes())
    (mixed / "part-1.parquet").write_bytes(b"PAR1 not parquet at all")
    assert _report(mixed, tmp_path / "y.html") == 0
    page = check_page(tmp_path / "y.html", _inspect(mixed, capsys=capsys))
    assert ("1 file could not be read: part-1.parquet", [str(mixed / "part-1.parquet")]) in (
        _anomalies(page)
    )
    first_row = re.search(r'<table id="per-file">.*?<tbody><tr[^>]*>(.*?)</tr>', page).group(1)
    assert "part-1.parquet" in first_row  # the worst file first


def test_quarantine_needs_its_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _report(CARTPOLE, tmp_path / "x.html", "--on-invalid", "quarantine") == 2
    assert "--quarantine-dir" in capsys.readouterr().err


def test_without_vl_convert_one_line_says_what_to_install(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['vl_convert'] = None\n"
        "from offline_prelearner.cli import main\n"
        f"sys.exit(main(['report', {str(CARTPOLE)!r}, '--out', {str(tmp_path / 'x.html')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'offline-prelearner[report]'" in lines[0], lines
    assert not (tmp_path / "x.html").exists()


def test_the_python_function(tmp_path: Path) -> None:
    import offline_prelearner as op

    done = op.report(CARTPOLE, tmp_path / "r.html")
    assert done.out.is_file() and done.summary["episodes"] == 222
    assert done.charts[:4] == [
        "episode_length",
        "episode_return",
        "episode_discounted_return",
        "return_by_episode",
    ]
    assert np.isclose(done.summary["length"]["mean"], 5000 / 222)
    # Its JSON: the card, the drift verdicts, the returns beside the discounted ones, rounded.
    d = json.loads(json.dumps(done.to_dict()))
    assert d["gamma"] == 0.99 and d["drift"]["returns"]["episodes"] == 222
    assert d["returns"]["return"]["mean"] == 22.52  # every reward is 1: the mean length
    assert d["returns"]["discounted_return"]["max"] < d["returns"]["return"]["max"]
    assert d["card"]["observation_space"].startswith("float32 (4,)")


def test_the_script_is_built_once_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offline_prelearner.report import build

    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    import vl_convert

    cached = tmp_path / "cache" / f"vega-bundle-vl-convert-{vl_convert.__version__}.js"
    cached.write_text("half a bundle")  # not what vl-convert writes: built again
    build._javascript.cache_clear()
    try:
        text = build._javascript()
        assert "window.vegaEmbed=" in text[-500:] and cached.read_text() == text
        build._javascript.cache_clear()
        monkeypatch.setattr(vl_convert, "javascript_bundle", lambda: pytest.fail("not cached"))
        assert build._javascript() == text  # read back, not built
    finally:
        build._javascript.cache_clear()


def _rising(tmp_path: Path, episodes: int, top: float) -> Path:
    """Rows of ``episodes`` 10-step episodes whose returns rise from 20 to ``top``."""
    eps = []
    for i, ret in enumerate(np.linspace(20, top, episodes)):
        e = make_episode(10, id=i, seed=i)
        e.rewards[:] = ret / 10
        eps.append(e)
    data = tmp_path / f"rising-{episodes}"
    data.mkdir()
    pq.write_table(to_table(episodes_to_columns(eps)), data / "part-0.parquet")
    return data


def test_drift_is_judged_for_few_episodes(tmp_path: Path) -> None:
    """Issue 35: a 40-episode set whose returns go from 20 to 500 shows its drift; 25
    episodes of steady returns show none, and the page says what the test can see."""
    out = tmp_path / "rising.html"
    assert _report(_rising(tmp_path, 40, 500), out) == 0
    page = out.read_text()
    drifts = [t for t, _ in _anomalies(page) if t.startswith("returns drift from ")]
    assert len(drifts) == 1 and "40 episodes" in drifts[0], _anomalies(page)
    assert re.search(r'<p class="power" data-series="returns">With 40 episodes', page)
    flat = tmp_path / "flat.html"
    assert _report(_rising(tmp_path, 25, 20), flat) == 0  # 25 episodes, every return 20
    page = flat.read_text()
    assert not [t for t, _ in _anomalies(page) if "drift" in t]
    verdict = re.search(r'<p class="drift" data-series="returns">([^<]*)</p>', page)
    assert (
        verdict and verdict[1].startswith("Returns over 25 episodes") and "no drift" in verdict[1]
    )
    assert re.search(r'<p class="power" data-series="returns">With 25 episodes[^<]*unseen', page)


def test_gamma_sets_the_discounted_return(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.html"
    assert _report(_rising(tmp_path, 6, 20), out, "--gamma", "0.5") == 0  # rewards 2 a step
    page = out.read_text()
    table = re.search(r'<table id="returns" data-gamma="0.5">(.*?)</table>', page, re.S)
    assert table and "discounted return (gamma = 0.5)" in table[1]
    want = human(sum(2 * 0.5**t for t in range(10)))  # 3.996
    row = re.search(r"<td>discounted return \(gamma = 0.5\)</td>((?:<td>[^<]*</td>)+)", page)
    assert row and re.findall(r"<td>([^<]*)</td>", row[1]) == [want, want, want, "0"]
    assert 'data-chart="episode_discounted_return"' in page
    capsys.readouterr()
    assert _report(_rising(tmp_path, 7, 20), tmp_path / "bad.html", "--gamma", "1.5") == 2
    err = capsys.readouterr().err.strip()
    assert "gamma" in err and "1.5" in err and "\n" not in err


def test_a_constant_image_channel_is_listed(tmp_path: Path) -> None:
    """Issue 35: the channel highlighted in the table is listed under the anomalies."""
    eps = []
    for i in range(4):
        e = make_episode(5, id=i, seed=i, obs_shape=(8, 8, 3), obs_dtype=np.uint8)
        e.observations[..., 1] = 7
        eps.append(e)
    data = tmp_path / "frames"
    data.mkdir()
    pq.write_table(to_table(episodes_to_columns(eps)), data / "part-0.parquet")
    out = tmp_path / "frames.html"
    assert _report(data, out) == 0
    page = out.read_text()
    assert ("obs[channel 1] is constant (7) in every frame", ["obs[channel 1]"]) in _anomalies(page)
    assert _bad_rows(page, "observation-stats") == ["obs[channel 1]"]


@pytest.mark.parametrize("version", ["v30_av1", "v21_av1"])
def test_lerobot_dataset(version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34: a strip of frames per camera, fps, cameras, tasks and robot type."""
    root = REPO / "tests" / "fixtures" / "lerobot" / version
    info = json.loads((root / "meta" / "info.json").read_text())
    out = tmp_path / f"{version}.html"
    assert _report(root, out) == 0
    page = check_page(out, _inspect(root, capsys=capsys))
    card = _card(page)
    assert card["fps"] == human(float(info["fps"])) and card["robot_type"] == info["robot_type"]
    cameras = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    assert len(cameras) == 2
    for cam in cameras:
        assert cam in card["cameras"]
        leaf = "obs." + cam.removeprefix("observation.")
        strip = re.search(rf'<div class="frames" data-leaf="{re.escape(leaf)}">(.*?)</div>', page)
        assert strip and strip[1].count('src="data:image/png;base64,') >= 2, leaf
    assert card["tasks"] == ", ".join(_inspect(root, capsys=capsys)["dataset"]["tasks"])
    assert card["lerobot_version"] == version[:1] + version[1] + "." + version[2]

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


def _summary(page: str) -> dict[str, str]:
    found = re.findall(r'<dd data-key="([^"]+)">([^<]*)</dd>', page)
    return {html.unescape(k): html.unescape(v) for k, v in found}


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
    for key, value in summary.items():
        assert key in flat, f"{key} is not a key of inspect --json"
        if key == "seconds":  # its own run's time
            assert float(value) > 0
            continue
        expected = flat[key] if isinstance(flat[key], str) else json.dumps(flat[key])
        assert value == expected, key
    for reason in inspected["rejected"]:
        assert f"rejected.{reason}" in summary
    # Self-contained: no script, style, image or frame loaded from anywhere.
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", page, flags=re.S)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=\"(?!data:)", markup)
    assert page.count("<script") == markup.count("<script") == 3  # specs, bundle, ours
    assert not re.search(r"jsdelivr|unpkg|cdnjs|googleapis", page)
    urls = set(re.findall(r"https?://[^\s\"'`)<]+", page))
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
    assert '<dd data-key="episodes">222</dd>' in page
    assert "<li>every reward is 1</li>" in page
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
        assert '<dd data-key="format">minari</dd>' in page
        if name.startswith("images"):  # a strip of sample frames, PNGs inline
            strip = re.search(r'<div class="frames" data-leaf="obs.pixels">(.*?)</div>', page)
            assert strip and strip.group(1).count('src="data:image/png;base64,') >= 2
        if name.startswith("cartpole"):  # Discrete(2) declared: out-of-space counted, 0
            assert re.search(r"<td>obs\[0\]</td>(<td>[^<]*</td>){8}<td>0</td>", page)


def test_d4rl_files(d4rl_cases: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = d4rl_cases["d4rl_open_end"]
    out = tmp_path / "d4rl.html"
    assert _report(case.path, out) == 0
    inspected = _inspect(case.path, capsys=capsys)
    page = check_page(out, inspected)
    assert inspected["rejected"]  # the open end: rejected, counted, said at the top
    assert re.search(r"<li>\d+ rows? rejected: not_done", page)
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
    assert '<dd data-key="episodes">222</dd>' in page


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
    assert "<li>1 file could not be read</li>" in page
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
    assert done.charts[:3] == ["episode_length", "episode_return", "return_by_episode"]
    assert np.isclose(done.summary["length"]["mean"], 5000 / 222)


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

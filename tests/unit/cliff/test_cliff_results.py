"""Results writer: CSV rows, JSON, real PNGs of the expected size, self-contained HTML."""

from __future__ import annotations

import base64
import json
import re
import struct

import pytest

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import burst, profiles, results

ARMS = ("vram", "dram", "nvme")
LADDER = (1, 8, 32, 64)
ITERATIONS = 2
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fake_rows():
    rows = []
    curves = {"vram": [100, 700, 2000, 900], "dram": [100, 750, 2400, 2500], "nvme": [100, 760, 2500, 2900]}
    for arm in ARMS:
        for c, tput in zip(LADDER, curves[arm], strict=True):
            for it in range(ITERATIONS):
                wall = c * 20 / tput
                summary = {
                    "wall_s": wall,
                    "ok_count": c,
                    "err_count": 0,
                    "total_prompt_tokens": c * 20,
                    "total_output_tokens": c,
                    "requests_per_s": c / wall,
                    "throughput_tok_s_total": (c * 21) / wall,
                    "throughput_tok_s_prompt": tput * (1 + 0.01 * it),
                    "p50_latency_s": wall * 0.8,
                    "p95_latency_s": wall,
                }
                delta = {"l1_cache_queries": 20.0 * c, "l1_cache_hits": 5.0 * c, "ext_cache_queries": 0.0}
                rows.append(results.make_row(arm, c, it, summary, delta, "cliff_kvd", drained=True, drain_wait_s=12.0))
    return rows


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    return struct.unpack(">II", data[16:24])


def test_csv_has_one_row_per_arm_concurrency_iteration(tmp_path):
    path = tmp_path / results.CSV_NAME
    rows = fake_rows()
    results.append_csv(path, rows[:8])
    results.append_csv(path, rows[8:])  # a second arm run appends without a second header
    lines = path.read_text().splitlines()
    assert lines[0].split(",") == results.CSV_COLUMNS
    assert len(lines) == 1 + len(ARMS) * len(LADDER) * ITERATIONS
    back = results.read_csv(path)
    keys = [(r["arm"], r["concurrency"], r["iter"]) for r in back]
    assert len(set(keys)) == len(keys) == 24
    assert set(keys) == {(a, c, i) for a in ARMS for c in LADDER for i in range(ITERATIONS)}
    for col in ("l1_hit_rate_pct", "ext_hit_rate_pct", "lmcache_l1_hit_rate_pct", "lmcache_l2_hit_rate_pct"):
        assert col in results.CSV_COLUMNS
    assert {r["l1_hit_rate_pct"] for r in back} == {25.0}
    assert {r["ext_hit_rate_pct"] for r in back} == {0.0}  # zero queries: 0, not an error
    assert back[0]["drained"] is True and isinstance(back[0]["concurrency"], int)


def test_csv_with_other_columns_is_refused(tmp_path):
    path = tmp_path / results.CSV_NAME
    path.write_text("arm,concurrency\nvram,1\n")
    with pytest.raises(ValueError, match="different columns"):
        results.append_csv(path, fake_rows())


def test_report(tmp_path):
    profile = profiles.resolve_profile("cliff_kvd")
    results.write_csv(tmp_path / results.CSV_NAME, fake_rows())
    paths = results.write_report(str(tmp_path), profile=profile)

    doc = json.loads((tmp_path / results.JSON_NAME).read_text())
    assert doc["profile"]["name"] == "cliff_kvd"
    assert len(doc["rows"]) == 24
    assert [e["concurrency"] for e in doc["arms"]["nvme"]] == list(LADDER)
    assert doc["arms"]["nvme"][0]["iterations"] == ITERATIONS
    assert doc["cliffs"]["vram"]["cliff"] == 64
    assert doc["cliffs"]["nvme"]["cliff"] is None

    for key in ("throughput_png", "latency_png"):
        assert png_size(tmp_path / paths[key].split("/")[-1]) == results.PLOT_SIZE_PX
    import matplotlib.image

    image = matplotlib.image.imread(paths["throughput_png"])
    assert image.shape[:2] == (results.PLOT_SIZE_PX[1], results.PLOT_SIZE_PX[0])

    page = (tmp_path / results.HTML_NAME).read_text()
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(embedded) == 2
    assert all(base64.b64decode(data)[:8] == PNG_SIGNATURE for data in embedded)
    assert base64.b64decode(embedded[0]) == (tmp_path / results.THROUGHPUT_PNG).read_bytes()
    assert "<th>vram</th>" in page and 'src="http' not in page  # self-contained


def test_report_with_single_point_and_errors(tmp_path):
    summary = burst.summarize([burst.RequestRecord(0, 1.0, None, False, None, None, "boom")], 1.0)
    rows = [results.make_row("nvme", 32, 0, summary, {}, "cliff_spur_l2")]
    paths = results.write_report(str(tmp_path), rows=rows)
    assert png_size(tmp_path / results.LATENCY_PNG) == results.PLOT_SIZE_PX
    doc = json.loads((tmp_path / results.JSON_NAME).read_text())
    assert doc["cliffs"]["nvme"] == {"throughput": None, "p95": None, "cliff": None, "peak_c": 32}
    assert doc["rows"][0]["p95_latency_s"] is None
    assert paths["html"].endswith(results.HTML_NAME)

"""`%kf_compare` and the overlay view (issue 25): static HTML a saved notebook keeps, one line
per job and chart per metric; real local jobs through a real IPython shell."""

from __future__ import annotations

import base64
import re

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter.magics.compare import CompareMagics
from kf_jupyter.magics.core import KubeflowMagics
from kf_jupyter.widgets.compare import Run, compare_bundle, overlay_svg


def _svgs(html_text: str) -> dict[str, str]:
    """The charts of a static view, decoded from their data-URI images, by metric."""
    out = {}
    for metric, data in re.findall(
        r"data-metric='([^']*)'[^>]*src='data:image/svg\+xml;base64,([^']+)'", html_text
    ):
        out[metric] = base64.b64decode(data).decode()
    return out


def test_overlay_has_one_line_per_job_in_its_colour_and_a_shared_scale():
    runs = [
        Run("a", "Complete", {"loss": [(0, 1.0), (1, 0.5), (2, 0.25)]}),
        Run("b", "Complete", {"loss": [(0, 2.0), (1, 1.5)], "acc": [(1, 0.9)]}),
        Run("c", "Failed", {}),
    ]
    svg = overlay_svg("loss", runs)
    lines = re.findall(r"<polyline[^>]*data-run='([^']+)' stroke='([^']+)'", svg)
    assert lines == [("a", "#1d6ea7"), ("b", "#c92526")]
    assert "<text" not in svg  # the chart's texts are page text, in the theme's colours
    bundle = compare_bundle(runs)
    # one scale for both: b's first point (2.0) is the top of the chart, a's last (0.25) the
    # bottom, steps 0 to 2
    figures = re.findall(r"<figure class='kf-compare-figure'.*?</figure>", bundle["text/html"])
    texts = [[t for t in re.split(r"<[^>]+>", f) if t.strip()] for f in figures]
    assert texts == [
        ["acc", "0.9", "0.9", "step 1", "step 1"],
        ["loss", "2", "0.25", "step 0", "step 2"],
    ]
    charts = _svgs(bundle["text/html"])
    assert sorted(charts) == ["acc", "loss"]
    assert "<circle" in charts["acc"] and "data-run='b'" in charts["acc"]  # one point: a dot
    rows = re.findall(r"<tr class='kf-compare-row' data-job='([^']+)'", bundle["text/html"])
    assert rows == ["a", "b", "c"]
    text = bundle["text/plain"].splitlines()
    assert text[0] == "Comparing 3 jobs"
    assert text[1].split() == ["job", "status", "took", "acc", "loss"]
    assert text[2].split() == ["a", "Complete", "0.25"]
    assert text[3].split() == ["b", "Complete", "0.9", "1.5"]
    assert text[4].split() == ["c", "Failed"]


def test_compare_view_escapes_names_and_says_when_nothing_was_reported():
    runs = [Run("<b>x</b>", "Complete", {"l<o>ss": [(0, 1.0), (1, 2.0)]})]
    html_text = compare_bundle(runs)["text/html"]
    assert "<b>x</b>" not in html_text and "&lt;b&gt;x&lt;/b&gt;" in html_text
    svg = _svgs(html_text)["l&lt;o&gt;ss"]
    assert "<o>" not in svg
    assert "<figcaption class='kf-chart-label'" in html_text
    assert ">l&lt;o&gt;ss</figcaption>" in html_text and "<o>" not in html_text
    empty = compare_bundle([Run("a", "Complete", {})])["text/html"]
    assert "None of these jobs reported a metric" in empty and "<img" not in empty


def test_non_finite_points_are_left_out_of_the_chart():
    runs = [Run("a", "Complete", {"loss": [(0, 1.0), (1, float("nan")), (2, 0.5)]})]
    svg = overlay_svg("loss", runs)
    points = re.search(r"points='([^']+)'", svg).group(1).split()
    assert len(points) == 2 and "nan" not in svg


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    sh.register_magics(CompareMagics(shell=sh, core=magics))
    sh.kf = magics  # type: ignore[attr-defined]
    yield sh
    for client in magics._clients.values():
        if client.backend_name == "local":
            for j in client.list_jobs():
                client.delete_job(j.name)


def test_compare_without_names_or_with_unknown_ones_is_one_paragraph(shell, capsys):
    result = shell.run_cell("%kf_compare")
    out = capsys.readouterr()
    assert not result.success
    text = out.out + out.err
    assert "%kf_compare needs the names" in text and "Traceback" not in text
    result = shell.run_cell("%kf_compare no-such-job other-missing")
    out = capsys.readouterr()
    text = out.out + out.err
    assert not result.success and "Traceback" not in text
    assert "'no-such-job', 'other-missing'" in text and "%kf_jobs" in text


def reporting(scale: float) -> None:
    """Reports four decreasing losses: scale / 1 .. scale / 4."""
    import kf_jupyter

    for s in range(4):
        kf_jupyter.report(step=s, loss=scale / (s + 1))


@pytest.mark.slow
def test_kf_compare_overlays_two_real_jobs_curves(shell, capsys):
    from kf_jupyter import TorchTrainer

    client = shell.kf.client("local")
    a = client.train(TorchTrainer(func=reporting, func_args={"scale": 1.0}, num_proc_per_node=1))
    b = client.train(TorchTrainer(func=reporting, func_args={"scale": 8.0}, num_proc_per_node=1))
    for name in (a, b):
        assert client.wait_for_job_status(name, timeout=180).status == "Complete"
    result = shell.run_cell(f"%kf_compare {a} {b}")
    out = capsys.readouterr().out
    assert result.success, out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert rows[a][1:2] == ["Complete"] and rows[a][-1] == "0.25"
    assert rows[b][1:2] == ["Complete"] and rows[b][-1] == "2"
    # the static view a notebook keeps: both jobs' four points on one chart
    from kf_jupyter.widgets.compare import read_run

    runs = [read_run(client, a), read_run(client, b)]
    assert [len(r.metrics["loss"]) for r in runs] == [4, 4]
    svg = _svgs(compare_bundle(runs)["text/html"])["loss"]
    assert re.findall(r"data-run='([^']+)'", svg) == [a, b]


def test_stdout_metric_reads_katib_style_lines():
    from kf_jupyter.widgets.compare import stdout_metric

    assert stdout_metric("epoch 3: loss=0.25 accuracy=0.9", "loss") == 0.25
    assert stdout_metric("loss = 1e-3", "loss") == 0.001
    assert stdout_metric("val_loss=0.5", "loss") is None
    assert stdout_metric("loss=", "loss") is None
    assert stdout_metric("loss=nan", "loss") is None

"""The rank colours are one list in the kernel and in the lab extension's stylesheet, per theme,
and each is readable (WCAG 2 contrast 4.5:1 or more) on the grounds of the theme it is drawn in:
JupyterLab's own light and dark themes, as installed (issue 22)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jupyter_core.paths import jupyter_path

from kf_jupyter.widgets.state import CHART_DARK_STYLE, DARK_STYLE, PALETTE, PALETTE_DARK

ROOT = Path(__file__).resolve().parents[1]
BASE_CSS = ROOT / "labextension" / "style" / "base.css"


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance of a #rgb / #rrggbb colour or of `white` / `black`."""
    hexes = {"white": "#ffffff", "black": "#000000"}
    h = hexes.get(colour, colour).lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    assert re.fullmatch(r"[0-9a-fA-F]{6}", h), colour

    def channel(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(h[i : i + 2], 16) / 255) for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two colours (1 to 21)."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_contrast_is_the_wcag_ratio() -> None:
    assert contrast("#000", "#fff") == pytest.approx(21.0)
    assert contrast("#767676", "white") == pytest.approx(4.54, abs=0.01)
    assert contrast("#444", "#444444") == 1.0


def _stylesheet_palette(selector: str) -> tuple[str, ...]:
    """The `--kf-palette-N` colours of the base.css rules whose selector is exactly `selector`
    (several such rules may set other variables too)."""
    css = BASE_CSS.read_text()
    rules = re.findall(r"(?m)^" + re.escape(selector) + r"\s*\{([^}]*)\}", css)
    assert rules, f"no rule `{selector} {{...}}` in {BASE_CSS}"
    slots = re.findall(r"--kf-palette-(\d+):\s*(#[0-9a-fA-F]{6})\s*;", "".join(rules))
    assert [int(n) for n, _ in slots] == list(range(len(slots))), slots
    return tuple(c.lower() for _, c in slots)


def test_the_stylesheet_has_the_kernels_rank_colours_in_each_theme() -> None:
    assert _stylesheet_palette("body") == PALETTE
    assert _stylesheet_palette("body[data-jp-theme-light='false']") == PALETTE_DARK
    # the kernel's own views swap in the same dark colours where the extension is absent
    for i, colour in enumerate(PALETTE_DARK):
        assert f".kf-src-{i}{{color:{colour}!important}}" in DARK_STYLE
        assert f".kf-chart-line-{i}{{stroke:{colour}}}" in CHART_DARK_STYLE


def _theme_grounds(theme: str) -> dict[str, str]:
    """--jp-layout-color0 and 1 (a notebook's and a panel's ground) of an installed JupyterLab
    theme (`theme-light-extension`), a `var(--x, fallback)` read as its fallback."""
    for folder in jupyter_path("lab", "themes"):
        css_file = Path(folder) / "@jupyterlab" / theme / "index.css"
        if css_file.exists():
            break
    else:
        pytest.fail(f"JupyterLab's {theme} is not installed (jupyter_path('lab', 'themes'))")
    css = css_file.read_text()
    grounds = {}
    for n in (0, 1):
        m = re.search(rf"--jp-layout-color{n}:\s*([^;]+);", css)
        assert m is not None, (theme, n)
        value = m.group(1).strip()
        fallback = re.fullmatch(r"var\(--[\w-]+,\s*([^)]+)\)", value)
        grounds[f"--jp-layout-color{n}"] = (fallback.group(1) if fallback else value).strip()
    return grounds


@pytest.mark.parametrize(
    ("theme", "palette"),
    [("theme-light-extension", PALETTE), ("theme-dark-extension", PALETTE_DARK)],
)
def test_every_rank_colour_is_readable_on_its_themes_grounds(
    theme: str, palette: tuple[str, ...]
) -> None:
    grounds = _theme_grounds(theme)
    low = [
        (colour, name, ground, round(contrast(colour, ground), 2))
        for colour in palette
        for name, ground in grounds.items()
        if contrast(colour, ground) < 4.5
    ]
    assert low == [], f"rank colours under 4.5:1 in {theme}: {low}"


def test_the_light_colours_are_readable_on_a_static_charts_own_white_ground() -> None:
    """A saved view's chart is an image (no theme reaches it): its lines are the light colours
    on its own white ground, whatever the theme around it."""
    assert min(contrast(c, "#fff") for c in PALETTE) >= 4.5

"""The report site in a real browser: headless Chromium (Debian's `chromium-headless-shell`, which
.ci/run installs) opens the leaderboard and a model page from disk, screenshots each, and proves
the page rendered: the screenshot is not blank, the tables are in the DOM, every image loaded.

How images are checked without a script in the site itself: each page is copied, and the copy gets
one inline script that, on the window's load event (after every image has loaded or failed), writes
the number of images and the sources of the broken ones onto <body>; Chromium's `--dump-dom` prints
the DOM after load, so the test reads them there. The screenshots are of the pages as built. The
test is skipped only where no Chromium binary is found, and says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from site_factory import CORNER, report, shared_evaluation

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
CHROMIUM = next((found for name in BROWSERS if (found := shutil.which(name))), None)
# the flags that keep a headless Chromium off the network (this machine refuses its connections)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
IMAGE_CHECK = """<script>
window.addEventListener("load", function () {
  var broken = [];
  for (const image of document.images) {
    if (!(image.complete && image.naturalWidth > 0)) broken.push(image.getAttribute("src"));
  }
  document.body.setAttribute("data-images", String(document.images.length));
  document.body.setAttribute("data-broken", broken.join(" "));
});
</script>
"""
PAGES = {"leaderboard": "index.html", "model": f"models/1-{CORNER}/index.html"}

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium binary found (looked for " + ", ".join(BROWSERS) + "); .ci/run installs "
    "chromium-headless-shell with apt-get",
)


def chromium(*arguments: str) -> str:
    with tempfile.TemporaryDirectory() as profile:  # a new, empty profile for every run
        done = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *arguments],
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    evaluation = shared_evaluation(tmp_path_factory)
    out = tmp_path_factory.mktemp("browser") / "site"
    assert report(evaluation.evals, out=out, data=evaluation.dataset) == 0
    return out


@needs_chromium
@pytest.mark.parametrize("kind", sorted(PAGES))
def test_each_page_kind_renders_in_chromium_with_every_image_loaded(site, kind, tmp_path):
    page = site / PAGES[kind]
    # the DOM after load, of a copy beside the original (same folder: the same relative images)
    checked = page.with_name(f"_checked_{kind}.html")
    checked.write_text(page.read_text("utf-8").replace("</body>", IMAGE_CHECK + "</body>"), "utf-8")
    try:
        dom = chromium("--dump-dom", checked.as_uri())
    finally:
        checked.unlink()
    body = re.search(r"<body([^>]*)>", dom).group(1)
    images = int(re.search(r'data-images="(\d+)"', body).group(1))
    broken = re.search(r'data-broken="([^"]*)"', body).group(1)
    assert broken == "", f"broken images on the {kind} page: {broken}"
    assert images >= (1 if kind == "leaderboard" else 20)  # the figure; the plots and the thumbnails
    assert dom.count("<table") >= (1 if kind == "leaderboard" else 8)
    if kind == "model":
        assert dom.count('class="thumb error"') == 18 and "Failure galleries" in dom

    shot = tmp_path / f"{kind}.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())
    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    assert pixels.shape[:2] == (1600, 1280)
    background = pixels[-1, -1]  # the page's own background, bottom right
    painted = np.abs(pixels - background).sum(axis=2) > 30
    assert painted.mean() > 0.05, f"the {kind} page looks blank ({painted.mean():.3f} of its pixels painted)"
    assert painted[:60].mean() > 0.5  # the dark header band with the title and the data revision

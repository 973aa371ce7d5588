"""The viewer page in headless Chromium (tests/support/viewer_browser.py).

Three programs' pages, written by `jaxpr-load FILE --html OUT.html`, are
opened from file://: the graph must show one node per equation of the
program's top level (counted by the Python reader, JAX's own objects),
expanding a `scan` (a real click on its toggle) must show its body's
equations, search must find a primitive, and selecting an equation must show
its params. The shipped page without a file must read a dropped one.
Screenshots go to tests/artifacts/ (git-ignored). Skipped when Chromium,
chromedriver or selenium is missing; CI installs them (.ci/run).
"""

from __future__ import annotations

import base64
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.tools import load as load_cli
from tests.support import viewer_browser
from tests.support import paths

ROOT = pathlib.Path(paths.ROOT)
ARTIFACTS = ROOT / "tests" / "artifacts"

# CI (.ci/run) installs the browser and sets JAXPR_IO_REQUIRE_VIEWER_TOOLS:
# there a missing browser fails the tests instead of skipping them.
pytestmark = [pytest.mark.once, pytest.mark.skipif(
    viewer_browser.missing() is not None
    and not os.environ.get("JAXPR_IO_REQUIRE_VIEWER_TOOLS"),
    reason=str(viewer_browser.missing()))]


def scan_program():
  def f(x, w):
    def body(c, y):
      return c * 2 + jnp.sin(y), jnp.cos(c)
    c, ys = jax.lax.scan(body, x, w)
    return c.sum() + ys.mean()
  return jaxpr_io.trace(f, np.ones(3, np.float32), np.ones((4, 3), np.float32))


def mlp_program():
  w1 = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
  def f(params, x):
    h = jax.nn.relu(x @ w1 + params["b"])
    return {"y": jnp.tanh(h @ params["w"]), "norm": jnp.sum(h * h)}
  return jaxpr_io.trace(f, {"b": np.zeros(8, np.float32),
                            "w": np.ones((8, 2), np.float32)},
                        np.ones((3, 4), np.float32))


def control_flow_program():
  def f(x, n):
    y = jax.lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x)
    def body(i, c):
      return c + jax.lax.scan(lambda a, b: (a + b, a * b), c, x)[0]
    return jax.lax.fori_loop(0, n, body, y)
  return jaxpr_io.trace(f, np.arange(3, dtype=np.float32), 2)


PROGRAMS = {"scan": scan_program, "mlp": mlp_program,
            "control_flow": control_flow_program}


@pytest.fixture(scope="module")
def driver():
  with viewer_browser.chromium() as d:
    yield d


def _page(tmp_path, name, prog):
  src = tmp_path / f"{name}.jaxpr"
  jaxpr_io.save(src, prog)
  out = tmp_path / f"{name}.html"
  assert load_cli.main([str(src), "--html", str(out)]) == 0
  return out


def _eqn_nodes(driver, parent=None):
  """The primitives of the drawn equation nodes inside `parent` (None: the
  top level). Read in one script: each frame redraws the graph, so element
  handles go stale."""
  return driver.execute_script(
      "return [...document.querySelectorAll('g.node[data-kind=eqn]')]"
      ".filter(n => n.getAttribute('data-parent') === arguments[0])"
      ".map(n => n.dataset.prim);", parent)


def _click(driver, css, attempts=20):
  """Clicks the element `css` selects, again if a redraw replaced it."""
  from selenium.common.exceptions import StaleElementReferenceException  # pylint: disable=g-import-not-at-top
  for _ in range(attempts):
    try:
      driver.find_element("css selector", css).click()
      return
    except StaleElementReferenceException:
      time.sleep(0.05)
  raise AssertionError(f"{css} kept being redrawn")


def _wait(driver, predicate, timeout=30.0):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    value = predicate()
    if value:
      return value
    time.sleep(0.05)
  raise AssertionError("the page did not get there in time")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_page(driver, tmp_path, name):
  prog = PROGRAMS[name]()
  jaxpr = prog.closed_jaxpr.jaxpr
  viewer_browser.open_page(driver, _page(tmp_path, name, prog))
  state = driver.execute_script("return window.jaxprViewer")
  assert state.get("error") is None, state
  assert driver.get_log("browser") == []  # no script errors

  # One node per top-level equation, all on screen for these programs.
  assert state["topEquations"] == len(jaxpr.eqns)
  top = _eqn_nodes(driver)
  assert len(top) == len(jaxpr.eqns)
  assert sorted(top) == sorted(
      e.primitive.name for e in jaxpr.eqns)

  # The signature: one row per input and output, with key paths.
  rows = driver.find_elements("css selector", "#signature tr")
  assert len(rows) == len(prog.closed_jaxpr.in_avals) + len(
      prog.closed_jaxpr.out_avals)
  text = driver.find_element("id", "signature").text
  for path in load_cli.input_paths(prog) + load_cli.output_paths(prog):
    assert path in text

  # Expanding a scan (clicking its toggle) shows its body in place.
  scans = [(i, e) for i, e in enumerate(jaxpr.eqns)
           if e.primitive.name == "scan"]
  if scans:
    i, scan = scans[0]
    _click(driver, f"g.node[data-id='{i}'] .toggle")
    body = scan.params["jaxpr"].jaxpr.eqns
    inner = _wait(driver, lambda: _eqn_nodes(driver, parent=str(i)))
    assert sorted(inner) == sorted(
        e.primitive.name for e in body)

  # Search finds a primitive (nested ones too), and a result selects its
  # equation and shows its params.
  target = {"scan": "sin", "mlp": "dot_general", "control_flow": "while"}[name]
  box = driver.find_element("id", "search")
  box.clear()
  box.send_keys(target)
  results = _wait(driver, lambda: driver.find_elements(
      "css selector", "#results .result"))
  assert all(f" = {target}" in r.text for r in results)
  results[0].click()
  selection = driver.find_element("id", "selection").text
  assert selection.startswith(target)
  if target == "dot_general":
    assert "dimension_numbers" in selection

  ARTIFACTS.mkdir(exist_ok=True)
  assert driver.save_screenshot(str(ARTIFACTS / f"viewer-{name}.png"))


def test_dropped_file(driver, tmp_path):
  """The shipped page, without a file, reads one dropped onto it."""
  prog = mlp_program()
  data = jaxpr_io.dumps(prog)
  viewer_browser.open_page_without_file(
      driver, ROOT / "jaxpr_io" / "_viewer" / "viewer.html")
  driver.execute_script(
      "const bytes = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));"
      "const dt = new DataTransfer();"
      "dt.items.add(new File([bytes], 'dropped.jaxpr'));"
      "document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt,"
      " bubbles: true, cancelable: true}));",
      base64.b64encode(data).decode())
  _wait(driver, lambda: driver.execute_script(
      "return window.jaxprViewer.ready"))
  assert driver.title.startswith("dropped.jaxpr")
  assert len(_eqn_nodes(driver)) == len(prog.closed_jaxpr.jaxpr.eqns)


def test_corrupt_dropped_file_is_reported(driver):
  data = bytearray(jaxpr_io.dumps(scan_program()))
  data[70] ^= 1
  viewer_browser.open_page_without_file(
      driver, ROOT / "jaxpr_io" / "_viewer" / "viewer.html")
  driver.execute_script(
      "window.jaxprViewer.load(Uint8Array.from(atob(arguments[0]),"
      " c => c.charCodeAt(0)), 'bad.jaxpr');",
      base64.b64encode(bytes(data)).decode())
  assert "program checksum mismatch" in driver.find_element("id",
                                                            "error").text


# ------------------------------------------- files that expand (issue 28)
def _shared_out_tree_file() -> bytes:
  # lazy: the crafting helpers are the hostile tests' (tests/hostile/).
  from tests.hostile import test_expansion  # pylint: disable=g-import-not-at-top
  return test_expansion.shared_out_tree_file()


def test_html_refuses_the_shared_out_tree_file(tmp_path, capsys):
  """`jaxpr-load --html` refuses the 960-byte file whose output signature
  is 2**40 leaves, in one line, and writes no page."""
  src = tmp_path / "shared.jaxpr"
  src.write_bytes(_shared_out_tree_file())
  out = tmp_path / "shared.html"
  assert load_cli.main([str(src), "--html", str(out)]) == 1
  errors = [line for line in capsys.readouterr().err.splitlines()
            if "error" in line]
  assert len(errors) == 1, errors
  assert "output signature is a pytree of" in errors[0], errors
  assert not out.exists()


@pytest.mark.parametrize("how", ["page", "dropped"])
def test_page_refuses_the_shared_out_tree_file(driver, tmp_path, how):
  """The page's own reader refuses the file, with the reason in the page,
  whether the file is in the page (written without `jaxpr-load`'s check)
  or dropped onto the shipped page; the page stays responsive."""
  data = _shared_out_tree_file()
  if how == "page":
    # lazy: only this test writes a page around a file --html refuses.
    from jaxpr_io.tools import html  # pylint: disable=g-import-not-at-top
    out = tmp_path / "shared.html"
    out.write_text(html.page_template()
                   .replace("/*NAME*/", "shared.jaxpr", 1)
                   .replace("/*DATA*/", base64.b64encode(data).decode(), 1))
    viewer_browser.open_page(driver, out, timeout=60)
  else:
    viewer_browser.open_page_without_file(
        driver, ROOT / "jaxpr_io" / "_viewer" / "viewer.html")
    driver.execute_script(
        "window.jaxprViewer.load(Uint8Array.from(atob(arguments[0]),"
        " c => c.charCodeAt(0)), 'shared.jaxpr');",
        base64.b64encode(data).decode())
  text = _wait(driver, lambda: driver.find_element("id", "error").text,
               timeout=60)
  assert text.startswith(
      "Cannot read shared.jaxpr: the output signature is a pytree of "
      "2,199,023,255,551 nodes (counting every use of a shared node), more "
      "than a file of "), text
  assert driver.execute_script("return 1 + 1") == 2  # not hung

"""How long the viewer takes to open a 48-layer transformer in headless
Chromium.

The program is bench_format.py's decoder-only Flax transformer (unrolled
layers, parameters passed as an argument, about 4,000 equations at the top
level). The script writes the page with `jaxpr-load`'s code
(`jaxpr_io.tools.html`), opens it from file:// in headless Chromium (Debian's
chromium + chromium-driver, driven by Selenium), and prints, for each of
--repeats fresh page loads, the page's own measurements: decoding (the
JavaScript reader: container, checksums, protobuf, tables) and the first
render (panels, layout and the first frame of the graph), plus the wall time
from navigation until the page reports it has drawn. Then it times one
search and one zoom-out redraw, and saves a screenshot (--screenshot).

Run from the repository root::

    python benchmarks/bench_viewer.py [--layers 48] [--repeats 3] [--screenshot docs/viewer.png]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxpr_io  # noqa: E402
from jaxpr_io.tools import html  # noqa: E402
from tests.support import viewer_browser  # noqa: E402
from bench_format import BATCH, SEQ_LEN, Transformer, count_eqns  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--layers", type=int, default=48)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--screenshot", default=None,
                      help="where to save a PNG of the opened page")
  args = parser.parse_args()
  why = viewer_browser.missing()
  if why:
    sys.exit(f"bench_viewer: {why}")

  model = Transformer(args.layers)
  tokens = jnp.zeros((BATCH, SEQ_LEN), jnp.int32)
  params = model.init(jax.random.key(0), tokens)
  prog = jaxpr_io.trace(lambda p, t: model.apply(p, t), params, tokens)
  data = jaxpr_io.dumps(prog)
  with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "transformer.jaxpr")
    with open(src, "wb") as f:
      f.write(data)
    page = os.path.join(tmp, "transformer.html")
    size = html.write_page(src, page)
    print(f"== viewer: {args.layers}-layer transformer, "
          f"{count_eqns(prog.closed_jaxpr.jaxpr)} equations "
          f"({len(prog.closed_jaxpr.jaxpr.eqns)} at the top level), "
          f"{len(data):,}-byte file, {size:,}-byte page ==")
    decode, render, wall = [], [], []
    with viewer_browser.chromium() as driver:
      for _ in range(args.repeats):
        start = time.perf_counter()
        viewer_browser.open_page(driver, page)
        wall.append(time.perf_counter() - start)
        state = driver.execute_script("return window.jaxprViewer")
        if state.get("error") is not None:
          sys.exit(f"bench_viewer: the page refused the file: {state['error']}")
        decode.append(state["timings"]["decode_ms"])
        render.append(state["timings"]["render_ms"])
      search_ms = driver.execute_script(
          "const t = performance.now(); window.jaxprViewer.search('dot_general');"
          " return performance.now() - t;")
      found = driver.execute_script("return window.jaxprViewer.lastResults")
      zoom_ms = driver.execute_async_script(
          "const done = arguments[arguments.length - 1];"
          "const svg = document.getElementById('graph');"
          "const t = performance.now();"
          "svg.dispatchEvent(new WheelEvent('wheel', {deltaY: 800, clientX: 600, clientY: 400, bubbles: true}));"
          "requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t)));")
      if args.screenshot:
        driver.execute_script("window.jaxprViewer.search('');")
        # The first attention block, its first `jit` expanded in place.
        driver.execute_script(
            "const id = document.querySelector('g.node[data-prim=\"dot_general\"]').dataset.id;"
            "window.jaxprViewer.goTo(id);")
        time.sleep(0.3)  # drawn: now only what is on screen is in the DOM
        driver.execute_script(
            "const jit = document.querySelector('g.node[data-prim=\"jit\"]');"
            "if (jit) window.jaxprViewer.expand(jit.dataset.id);")
        time.sleep(0.5)
        driver.save_screenshot(args.screenshot)
    med = statistics.median
    print(f"decode (JavaScript reader):      {med(decode):8.1f} ms  "
          f"(runs: {', '.join(f'{x:.0f}' for x in decode)})")
    print(f"first render (panels + graph):   {med(render):8.1f} ms  "
          f"(runs: {', '.join(f'{x:.0f}' for x in render)})")
    print(f"navigation to drawn (wall):      {med(wall) * 1e3:8.1f} ms")
    print(f"search 'dot_general':            {search_ms:8.1f} ms, {found} matches")
    print(f"zoom out, redraw:                {zoom_ms:8.1f} ms")
    if args.screenshot:
      print(f"screenshot: {args.screenshot}")


if __name__ == "__main__":
  main()

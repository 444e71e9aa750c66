"""JupyterLab and headless Chromium for ``tests/test_browser.py``.

:class:`JupyterLab` starts a JupyterLab server on a free loopback port with a
known token, in a temporary copy of ``notebooks/``, with its own Jupyter
config, data, runtime and settings folders (so nothing of the user's Jupyter
set-up takes part), all cells of a notebook attached to the page (windowing
mode "none": every output is in the DOM, not only those in view) and the news
and update toasts off. :func:`launch_chromium` starts Debian's ``chromium``
through Playwright (Playwright's own browser download is not used).
:class:`NotebookPage` is one opened notebook: run all, wait for the kernel,
read cells, outputs and panels.

Nothing here decides what a test asserts; it only reads the page.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

CHROMIUM = Path(os.environ.get("MAMBALAB_CHROMIUM", "/usr/bin/chromium"))
# As root on a machine whose network is closed: no sandbox, no GPU, no background connections.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--font-render-hinting=none"]
VIEWPORT = {"width": 1400, "height": 1400}  # tall enough for a whole panel in one screenshot
SKIP_ENV = "MAMBALAB_SKIP_BROWSER"

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
STDERR_MIME = "application/vnd.jupyter.stderr"

# JupyterLab settings, written as the user's own (the settings folder is a fresh temporary one).
LAB_SETTINGS = {
    # windowing "none": every cell is in the DOM; no scroll past the end: the notebook is as tall as its cells
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "scrollPastEnd": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    # no autosave: the copy is thrown away, and a save must not race a test's reads
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def free_port() -> int:
    """A loopback port nobody listens on now (the server is told not to try others)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_notebooks(src: Path, dst: Path) -> Path:
    """Copy the notebook folder (notebooks, ``solutions/``, ``conftest.py``) without caches or checkpoints."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", ".pytest_cache"))
    return dst


class JupyterLab:
    """A JupyterLab server of our own (see the module docstring); :meth:`stop` ends it and its kernels."""

    def __init__(self, notebooks: Path, workdir: Path, python: str = sys.executable) -> None:
        self.workdir = workdir
        self.root = copy_notebooks(notebooks, workdir / "notebooks")
        self.token = "mambalab-" + os.urandom(8).hex()
        self.python = python
        self.log_path = workdir / "jupyterlab.log"
        self.proc: subprocess.Popen | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
                         ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")):
            d = self.workdir / sub
            d.mkdir(exist_ok=True)
            env[var] = str(d)
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_TOKEN", None)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _write_settings(self) -> None:
        for rel, values in LAB_SETTINGS.items():
            path = self.workdir / "settings" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values, indent=2))

    def start(self, timeout: float = 90.0, tries: int = 3) -> "JupyterLab":
        """Start the server and wait until its REST API answers; a lost race for the port is retried."""
        env = self._env()
        self._write_settings()
        last = ""
        for _ in range(tries):
            self.port = free_port()
            cmd = [self.python, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                   f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                   f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                   f"--LabApp.user_settings_dir={self.workdir / 'settings'}",
                   f"--LabApp.workspaces_dir={self.workdir / 'workspaces'}",
                   "--LabServerApp.open_browser=False", "--ServerApp.log_level=WARN",
                   "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                   "--LabApp.extension_manager=readonly"]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                cmd.append("--allow-root")  # CI runs as root
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            log.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.api("GET", "/api/status")
                    return self
                except (urllib.error.URLError, ConnectionError, OSError):
                    time.sleep(0.3)
            last = self.log_tail()
            self.stop()
            if "already in use" not in last:
                break
        raise RuntimeError(f"JupyterLab did not start; its log ends with:\n{last}")

    def stop(self) -> None:
        """Shut the kernels down, then the server (SIGTERM, then SIGKILL to its own process group)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.shutdown_kernels()
            except Exception:  # noqa: BLE001 - the server is going anyway
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:  # kernels left behind share the server's process group (start_new_session)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- REST ------------------------------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, method: str, path: str):
        req = urllib.request.Request(self.base + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def kernels(self) -> list[dict]:
        """The server's kernels. Jupyter Server answers 500 to a listing that meets a kernel still being
        created (its ``last_activity`` not set yet: ``KeyError`` in ``kernel_model``); that listing is
        taken as "none ready yet" and the caller polls again."""
        try:
            return self.api("GET", "/api/kernels") or []
        except urllib.error.HTTPError as e:
            if e.code == 500:
                return []
            raise

    def shutdown_kernels(self) -> None:
        """End every session and kernel (one notebook's kernel must not hold memory during the next)."""
        for s in self.api("GET", "/api/sessions") or []:
            self.api("DELETE", f"/api/sessions/{s['id']}")
        for k in self.api("GET", "/api/kernels") or []:
            self.api("DELETE", f"/api/kernels/{k['id']}")

    def notebook_url(self, name: str) -> str:
        """The notebook alone in a reset workspace, with the token."""
        return f"{self.base}/lab/tree/{name}?reset&token={self.token}"


def launch_chromium(playwright):
    """Debian's Chromium, headless, through Playwright (which gives it a fresh, empty profile)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
                                      chromium_sandbox=False)


# -- one notebook in the page ---------------------------------------------------------------------

# Reads the notebook shown: per cell its type, prompt and outputs (mime type, text, widget DOM), and
# the kernel's state from the toolbar's execution indicator.
_READ_NOTEBOOK = """
() => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')].find(p => !p.classList.contains('lm-mod-hidden'));
  if (!panel) return null;
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map(c => {
    const code = c.classList.contains('jp-CodeCell');
    const prompt = code ? (c.querySelector('.jp-InputArea-prompt')?.textContent || '').trim() : '';
    const outputs = [...c.querySelectorAll('.jp-OutputArea-output')].map(o => ({
      mime: o.getAttribute('data-mime-type') || '',
      text: (t => t.length > 4000 ? t.slice(0, 1000) + '\\n…\\n' + t.slice(-3000) : t)(o.innerText || ''),
      widgets: o.querySelectorAll('.jupyter-widgets, .widget-box, .lm-Widget.jupyter-widgets').length,
      panels: o.querySelectorAll('.mambalab-panel').length,
      width: o.getBoundingClientRect().width,
      height: o.getBoundingClientRect().height,
    }));
    return {code, prompt, outputs};
  });
  return {status: ind ? ind.getAttribute('data-status') : null, cells};
}
"""


# One cell's output area: its <details> elements (how many, how many open) and whether ``needle`` is in
# its text (in one text node) and shown: not in the body of a closed <details>, its element rendered
# (checkVisibility: no display:none or content-visibility:hidden on the way up, which is how Chromium
# hides a closed <details>'s body) and a range around it with a non-empty box. A range's box alone is
# not enough: asking for it lays out the skipped content of a closed <details>.
_TEXT_SHOWN = """
([index, needle]) => {
  const panel = [...document.querySelectorAll('.jp-NotebookPanel')].find(p => !p.classList.contains('lm-mod-hidden'));
  const cell = panel && panel.querySelectorAll('.jp-Notebook .jp-Cell')[index];
  const area = cell && cell.querySelector('.jp-OutputArea');
  if (!area) return {details: 0, open: 0, present: false, visible: false};
  const details = [...area.querySelectorAll('details')];
  const walker = document.createTreeWalker(area, NodeFilter.SHOW_TEXT);
  let present = false, visible = false;
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const at = node.data.indexOf(needle);
    if (at < 0) continue;
    present = true;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + needle.length);
    const box = range.getBoundingClientRect();
    const el = node.parentElement;
    const folded = el.closest('details:not([open])');
    const inFold = folded && !el.closest('summary');
    const rendered = typeof el.checkVisibility !== 'function' ||
      el.checkVisibility({visibilityProperty: true, opacityProperty: true});
    if (!inFold && rendered && box.width > 0 && box.height > 0) visible = true;
  }
  return {details: details.length, open: details.filter(d => d.open).length, present, visible};
}
"""


class NotebookPage:
    """One notebook opened in JupyterLab in its own browser page."""

    def __init__(self, lab: JupyterLab, browser, name: str) -> None:
        self.lab = lab
        self.name = name
        self.context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1, reduced_motion="reduce",
                                           locale="en-US", timezone_id="UTC")
        self.page = self.context.new_page()
        self.console_errors: list[str] = []
        self.page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.console_errors.append(f"page error: {e}"))

    def close(self) -> None:
        self.context.close()

    @property
    def panel(self):
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")

    def read(self) -> dict | None:
        return self.page.evaluate(_READ_NOTEBOOK)

    def open(self, timeout: float = 120.0) -> None:
        """Open the notebook and wait until its kernel is started, connected to this page and idle."""
        self.page.goto(self.lab.notebook_url(self.name), wait_until="domcontentloaded", timeout=timeout * 1000)
        self.panel.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=timeout * 1000)
        deadline = time.monotonic() + timeout
        while not any(k["execution_state"] == "idle" and k.get("connections", 0) > 0
                      for k in self.lab.kernels()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no kernel connected after {timeout:.0f} s")
            time.sleep(0.3)
        self.wait_idle(max(5.0, deadline - time.monotonic()), settle=1.0)

    def run_all(self, timeout: float = 30.0) -> None:
        """Run ▸ Run All Cells, from the menu bar, as a person would; wait until a cell has started."""
        for _ in range(2):
            self.panel.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
            self.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
            self.page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                state = self.read()
                if state and any(re.search(r"\*|\d", c["prompt"]) for c in state["cells"] if c["code"]):
                    return
                time.sleep(0.2)
        raise TimeoutError(f"{self.name}: Run All Cells started no cell")

    def wait_idle(self, timeout: float, settle: float = 1.5) -> dict:
        """Wait until no cell is queued or running (no ``[*]``) and the kernel says idle, for ``settle`` s.

        Returns the last reading of the notebook. Raises ``TimeoutError``
        with what was still running.
        """
        deadline = time.monotonic() + timeout
        quiet_since = None
        state = None
        while True:
            state = self.read()
            busy = state is None or state["status"] != "idle" or any("*" in c["prompt"] for c in state["cells"])
            now = time.monotonic()
            if busy:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= settle:
                return state
            if now > deadline:
                running = [i for i, c in enumerate(state["cells"]) if "*" in c["prompt"]] if state else "?"
                raise TimeoutError(f"{self.name}: kernel not idle after {timeout:.0f} s "
                                   f"(status {state and state['status']}, cells running/queued: {running})")
            time.sleep(0.25)

    def text_shown(self, cell_index: int, needle: str) -> dict:
        """In a cell's outputs: ``details`` / ``open`` (<details> elements, open ones), ``present``
        (``needle`` is in the page's text) and ``visible`` (and drawn, i.e. a reader sees it)."""
        return self.page.evaluate(_TEXT_SHOWN, [cell_index, needle])

    def output_area(self, cell_index: int):
        return self.panel.locator(".jp-Notebook .jp-Cell").nth(cell_index).locator(".jp-OutputArea").first

    def screenshot_notebook(self, path: Path) -> Path:
        """The whole notebook, every cell, as one tall PNG (the page is scrolled by Playwright)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        nb = self.panel.locator(".jp-Notebook").first
        # The notebook scrolls inside its own element, so a page screenshot shows one screenful: make the
        # viewport as tall as the notebook's content instead, scroll it to the top, then take the element.
        measure = ("(el) => { const s = el.querySelector('.jp-WindowedPanel-outer') || el; s.scrollTop = 0;"
                   " return [s.scrollHeight, s.clientHeight]; }")
        try:
            for _ in range(4):
                content, shown = self.page.evaluate(measure, nb.element_handle())
                if content <= shown:
                    break
                vp = self.page.viewport_size
                self.page.set_viewport_size({"width": vp["width"],
                                             "height": int(min(vp["height"] + content - shown + 40, 32000))})
                self.page.wait_for_timeout(400)  # Lumino lays the panels out again on resize
            self.page.evaluate(measure, nb.element_handle())
            nb.screenshot(path=str(path), animations="disabled")
        finally:
            self.page.set_viewport_size(VIEWPORT)
        return path


def panel_calls(nb_path: Path) -> list[int]:
    """Indices of cells whose committed output is a widget's placeholder note (scripts/run_notebooks.py)."""
    from importlib import util

    spec = util.spec_from_file_location("run_notebooks", nb_path.parent.parent / "scripts" / "run_notebooks.py")
    note = "(an interactive panel: run this cell in Jupyter to open it)"
    if spec is not None:
        try:
            mod = util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            note = mod.WIDGET_NOTE
        except Exception:  # noqa: BLE001 - nbclient missing: fall back to the known text
            pass
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    out = []
    for i, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            text = data.get("text/plain", "")
            text = text if isinstance(text, str) else "".join(text)
            if WIDGET_MIME in data or text.strip() == note:
                out.append(i)
                break
    return out

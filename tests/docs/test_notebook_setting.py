"""The shipped JupyterLab setting: a tutorial's ``.py`` opens as a notebook on double-click.

``.jupyter/labconfig/default_setting_overrides.json`` makes jupytext's
"Jupytext Notebook" the default viewer of Python files. JupyterLab layers
``labconfig/default_setting_overrides.json`` from every folder of its config
path over its built-in defaults, and ``JUPYTER_CONFIG_PATH=.jupyter`` (the
command in docs/tutorials/index.md) adds the repository's folder to that
path. The test starts JupyterLab that way, asks its settings API for the
document manager's default viewers, and asks again without the variable, where
the setting must be absent (so it came from the shipped file).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETTING = ROOT / ".jupyter" / "labconfig" / "default_setting_overrides.json"
PLUGIN = "@jupyterlab/docmanager-extension:plugin"
VIEWER = "Jupytext Notebook"  # the name jupytext's JupyterLab extension registers its viewer under


def test_setting_makes_jupytext_the_default_viewer_of_python_files():
    setting = json.loads(SETTING.read_text())
    assert setting == {PLUGIN: {"defaultViewers": {"python": VIEWER}}}


def test_the_viewer_name_is_the_one_jupytext_registers():
    from jupyter_core.paths import jupyter_path

    bundles = [p for folder in jupyter_path("labextensions")
               for p in (Path(folder) / "jupyterlab-jupytext").rglob("*.js")]
    if not bundles:
        pytest.skip("jupytext's JupyterLab extension is not installed (pip install -e '.[notebooks]')")
    assert any(f'"{VIEWER}"' in p.read_text(errors="replace") for p in bundles)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_viewers(tmp_path: Path, config_path: str | None) -> dict:
    """Start JupyterLab (the user's own ~/.jupyter kept out), read the settings API, stop it."""
    port, token = _free_port(), secrets.token_hex(8)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    if config_path:
        env["JUPYTER_CONFIG_PATH"] = config_path
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
               "--ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}"]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/lab/api/settings/{PLUGIN}?token={token}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if server.poll() is not None:
                pytest.fail("jupyter lab exited: " + server.stderr.read().decode()[-2000:])
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    schema = json.load(answer)["schema"]
                return schema["properties"]["defaultViewers"]["default"]
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        pytest.fail("jupyter lab did not answer within 90 s")
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_jupyterlab_reads_the_shipped_setting(tmp_path):
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install -e '.[notebooks]')")
    pytest.importorskip("jupyterlab_server")
    assert default_viewers(tmp_path, ".jupyter").get("python") == VIEWER  # relative to the repository root
    assert default_viewers(tmp_path, None).get("python") is None  # not JupyterLab's own default

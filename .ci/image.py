"""The project's image built and run on a machine with no registry: ``up``, ``build``, ``down``.

``up``    installs Debian's Docker engine and debootstrap when missing and starts ``dockerd``
          without a bridge or iptables (containers use the host network, the tests bind
          127.0.0.1 only), unless an engine already answers.
``build`` builds the local base image (Debian bookworm's python3 via debootstrap, imported with
          ``docker import``) and the project's image from the unchanged Dockerfile; only build
          args differ: ``PYTHON_IMAGE`` is the local base, ``TORCH_INDEX_URL`` is empty, so pip's
          own configuration picks torch. That configuration is this machine's: its local
          find-links and index directories are served on 127.0.0.1 for the build's duration and
          the base image's /etc/pip.conf points at them (inert at run time).
``down``  stops the ``dockerd`` that ``up`` started, and nothing else.

Run as root (CI machines are). docs/deploy.md explains the steps; ``make test-image`` calls them.
"""

from __future__ import annotations

import argparse
import configparser
import functools
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("INFERPOOL_IMAGE_WORK", "/var/tmp/inferpool-image"))
BASE = os.environ.get("INFERPOOL_BASE_IMAGE", "inferpool-base:bookworm")
IMAGE = os.environ.get("INFERPOOL_IMAGE", "inferpool:test")
MIRROR = "http://deb.debian.org/debian"
PACKAGES = "python3,python3-venv,python3-pip"
# pip settings naming a file, and where the base image holds its copy: the constraints, and the
# CA bundle that may be what lets pip trust this network's way to PyPI.
FILES = {"constraint": "/etc/pip-constraints.txt", "cert": "/etc/pip-ca-bundle.crt"}
# Not needed to run Python or pip in the base: docs, manuals, translations, apt's downloads.
ROOTFS_EXCLUDES = (
    "./usr/share/doc/*",
    "./usr/share/man/*",
    "./usr/share/locale/*",
    "./var/cache/apt/*",
    "./var/lib/apt/lists/*",
)


def log(message: str) -> None:
    print(f"[image] {message}", flush=True)


def docker(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], text=True, check=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30).returncode == 0


def up() -> None:
    if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
        log("installing docker.io and debootstrap from Debian")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "docker.io", "debootstrap"], check=True, env=env)
    if engine_answers():
        log("a Docker engine already answers: using it")
        return
    WORK.mkdir(parents=True, exist_ok=True)
    with (WORK / "dockerd.log").open("ab") as sink:
        daemon = subprocess.Popen(
            ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (WORK / "dockerd.pid").write_text(str(daemon.pid))
    deadline = time.monotonic() + 60
    while not engine_answers():
        if daemon.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"dockerd did not start; see {WORK / 'dockerd.log'}")
        time.sleep(0.5)
    log(f"dockerd started (pid {daemon.pid})")


def down() -> None:
    pid_file = WORK / "dockerd.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    pid_file.unlink()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            log("dockerd stopped")
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def _pip_settings() -> dict[str, str]:
    """pip's effective global settings (files, then PIP_* variables) as pip reports them."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    settings: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".", 1)[-1]
        if key.startswith(("global.", ":env:.", "install.")):
            settings[name] = value.strip("'\"")
    return settings


def _local_path(entry: str) -> Path | None:
    path = Path(entry.removeprefix("file://"))
    return path if path.is_absolute() and path.exists() else None


def pip_conf(port: int, served: Path) -> str:
    """This machine's pip configuration, its local directories rewritten to ``served`` URLs."""
    settings, config = _pip_settings(), configparser.ConfigParser()
    config["global"] = {}
    for key in ("find-links", "index-url", "extra-index-url"):
        entries = []
        for entry in settings.get(key, "").split():
            local = _local_path(entry)
            if local is None:
                entries.append(entry)
                continue
            # An index's pages link files beside it (simple/x/ -> ../../files/): serve its parent.
            shared = local.parent if local.name == "simple" else local
            link = served / shared.relative_to("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(shared)
            entries.append(f"http://127.0.0.1:{port}{local}/")
        if entries:
            config["global"][key] = " ".join(entries)
    config["global"]["trusted-host"] = "127.0.0.1"
    for key, inside in FILES.items():
        if Path(settings.get(key, "/nonexistent")).exists():
            config["global"][key] = inside
    with tempfile.TemporaryFile("w+") as text:
        config.write(text)
        text.seek(0)
        return text.read()


def _rootfs() -> Path:
    rootfs = WORK / "rootfs"
    if not (rootfs / "usr" / "bin" / "python3").exists():
        log(f"debootstrap bookworm ({PACKAGES}) into {rootfs}")
        shutil.rmtree(rootfs, ignore_errors=True)
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(rootfs), MIRROR], check=True
        )
    return rootfs


def build_base(port: int, served: Path) -> None:
    rootfs = _rootfs()
    (rootfs / "etc" / "pip.conf").write_text(pip_conf(port, served))
    settings = _pip_settings()
    for key, inside in FILES.items():
        if Path(settings.get(key, "/nonexistent")).exists():
            shutil.copy(settings[key], rootfs / inside.lstrip("/"))
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--numeric-owner", *(f"--exclude={x}" for x in ROOTFS_EXCLUDES), "-c", "."],
        stdout=subprocess.PIPE,
    )
    docker("import", "--change", 'CMD ["python3"]', "-", BASE, stdin=tar.stdout, stdout=subprocess.DEVNULL)
    if tar.wait() != 0:
        sys.exit("tar of the base rootfs failed")


def build() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    served = Path(tempfile.mkdtemp(prefix="pip-served-", dir=WORK))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        build_base(port, served)
        log(f"base image {BASE} in {time.monotonic() - started:.0f} s")
        started = time.monotonic()
        docker(
            "build",
            "--network",
            "host",
            "--build-arg",
            f"PYTHON_IMAGE={BASE}",
            "--build-arg",
            "TORCH_INDEX_URL=",
            "-t",
            IMAGE,
            str(REPO),
            env={**os.environ, "DOCKER_BUILDKIT": "0"},  # the legacy builder: no frontend image to pull
        )
        log(f"image {IMAGE} in {time.monotonic() - started:.0f} s")
    finally:
        server.shutdown()
        shutil.rmtree(served, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["up", "build", "down"])
    {"up": up, "build": build, "down": down}[parser.parse_args().step]()


if __name__ == "__main__":
    main()

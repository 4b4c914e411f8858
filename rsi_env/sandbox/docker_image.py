"""The sandbox's Docker image, built on this machine: no registry is needed (or reachable).

The image is ``FROM scratch`` plus a static busybox (``apt-get install busybox-static``) for ``/bin/sh``
and the usual tools; a sandbox binds the host's Python read-only on top of it (see `DockerSandbox`).
``python -m rsi_env.sandbox.docker_image`` builds it ahead of time;
otherwise the first Docker sandbox builds it (about a second).
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path
from typing import Any

from rsi_env.errors import RsiEnvError

__all__ = ["DOCKERFILE", "IMAGE", "build_image", "ensure_image", "find_busybox"]

IMAGE = "rsi-env-sandbox:3"
DOCKERFILE = """\
# rsi-env sandbox: a static busybox and nothing else; the host's Python is bound read-only at run time.
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/mkdir", "-p", "/tmp", "/etc"]
RUN ["/bin/chmod", "1777", "/tmp"]
"""


def find_busybox() -> Path | None:
    """A busybox binary to put in the image (Debian's busybox-static installs a static one)."""
    for cand in (shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox"):
        if cand and Path(cand).is_file():
            return Path(cand).resolve()
    return None


def build_image(client: Any, tag: str = IMAGE) -> str:
    """Build the image from :data:`DOCKERFILE` and this machine's busybox; returns the tag."""
    import docker

    busybox = find_busybox()
    if busybox is None:
        raise RsiEnvError("the Docker sandbox image needs a static busybox: apt-get install busybox-static")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = DOCKERFILE.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.add(str(busybox), arcname="busybox")
    buf.seek(0)
    try:
        client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    except docker.errors.DockerException as exc:
        raise RsiEnvError(f"building the Docker sandbox image failed (is {busybox} static?): {exc}") from None
    return tag


def ensure_image(client: Any, tag: str = IMAGE) -> str:
    """The image's tag, building it first where it is missing."""
    import docker

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        build_image(client, tag)
    return tag


def main() -> None:
    import docker

    tag = build_image(docker.from_env())
    print(f"built {tag}")


if __name__ == "__main__":
    main()

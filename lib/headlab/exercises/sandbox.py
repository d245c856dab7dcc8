"""No network while grading: :func:`block_network` runs first in every submission's kernel.

It blocks every network connection that leaves this machine (any address outside the loopback
range) and every name lookup other than ``localhost``. The kernel talks to the grader over
ZeroMQ on the loopback interface, which stays open; the kernel is also started with the
Hugging Face libraries set offline.

This stops a submission (or a library it calls, such as a model download from a hub) from
reaching the network by accident: the call fails at once with :class:`NetworkBlocked`. It is
not a security boundary against a student who sets out to undo it from inside the kernel;
run the grader in a container without a network for that (``docker run --network none``).
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["NetworkBlocked", "block_network"]


class NetworkBlocked(OSError):
    """A connection to the network was attempted while grading."""


def _is_local(host) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _refuse(what: str) -> None:
    raise NetworkBlocked(f"no network during grading: {what} was refused "
                         "(the submission must run offline, like the book's own models)")


def block_network() -> None:
    """Make every non-loopback connection and name lookup of this process fail with NetworkBlocked."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(self, address):  # noqa: ANN001
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _refuse(f"a connection to {address[0]}")
        return real_connect(self, address)

    def connect_ex(self, address):  # noqa: ANN001
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _refuse(f"a connection to {address[0]}")
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):  # noqa: ANN001
        if not _is_local(host):
            _refuse(f"the name lookup of {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.getaddrinfo = getaddrinfo

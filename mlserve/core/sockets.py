"""Listening sockets: bound here for the faces, and asked about before a server starts."""

from __future__ import annotations

import socket

__all__ = ["bind_socket", "port_is_free"]


def bind_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A bound TCP socket for the HTTP face (shared by workers with ``reuse_port``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (no other process holds it)."""
    try:
        bind_socket(host, port).close()
    except OSError:
        return False
    return True

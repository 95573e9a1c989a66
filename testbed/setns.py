"""setns(2) for the calling thread: the one place the project enters network namespaces.

setns(2) moves only the calling thread. A socket belongs to the namespace of the
thread that created it, and keeps it after the thread has moved on, so a thread can
create sockets in several namespaces and serve them all from one ``epoll`` loop (the
traffic agent does), or a short-lived thread can enter a namespace for good
(:func:`testbed.nsops.call_in`).

Standard library only: the traffic agent imports this module and must start fast in
the slow guest. Python 3.11 has no ``os.setns``, hence ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

CLONE_NEWNET = 0x40000000
#: where ``ip netns add`` (and testbed.net) mount named network namespaces
NETNS_RUN_DIR = Path("/run/netns")

libc = ctypes.CDLL(None, use_errno=True)


class ReturnFailed(RuntimeError):
    """The calling thread could not go back to its own network namespace (it is left in
    another one: whatever it does next would happen in the wrong namespace)."""


def open_named(name: str) -> int:
    """A close-on-exec fd of the named network namespace ``/run/netns/<name>``.

    Raises OSError (filename set) when it does not exist or cannot be opened."""
    return os.open(NETNS_RUN_DIR / name, os.O_RDONLY | os.O_CLOEXEC)


def open_own() -> int:
    """A close-on-exec fd of the calling thread's current network namespace."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def switch(fd: int) -> None:
    """Move the calling thread into the network namespace ``fd`` refers to.

    Raises OSError (errno of setns(2): EPERM without CAP_SYS_ADMIN, EINVAL when ``fd``
    is not a network namespace, ...)."""
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def switched(target: int, home: int) -> Iterator[None]:
    """The calling thread inside namespace fd ``target`` for the block, then back in
    ``home``. Raises OSError when it cannot enter ``target`` (it then stays at home)
    and ReturnFailed when it cannot go back."""
    switch(target)
    try:
        yield
    finally:
        try:
            switch(home)
        except OSError as exc:
            raise ReturnFailed(f"cannot return to the original network namespace: {exc.strerror}") from exc


@contextlib.contextmanager
def entered(name: str | None) -> Iterator[None]:
    """The calling thread inside named namespace ``name`` for the block (None: where it
    is), then back in its own. Raises OSError (cannot open or enter ``name``) and
    ReturnFailed (cannot go back)."""
    if name is None:
        yield
        return
    home = open_own()
    try:
        target = open_named(name)
        try:
            with switched(target, home):
                yield
        finally:
            os.close(target)
    finally:
        os.close(home)

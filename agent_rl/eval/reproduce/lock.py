"""A run's workdir lock: two harness processes over one results dir never train into the same
workdir (runs.execute claims each run before it trains; the trainer inherits the lock)."""
from __future__ import annotations

import fcntl
import os
import socket
from typing import Optional

LOCK_FILE = "reproduce.lock"  # flock'ed while the run trains; holds "<host> <pid>" of its harness
_HELD: dict[str, int] = {}  # workdir -> this process's descriptor of its (locked) lock file


def claim(workdir: str) -> Optional[str]:
  """Takes the workdir's lock for this process; returns None when taken, else who holds it.

  Two harness processes over one results dir (a second `reproduce.py` started beside the
  first, to add runs at once) must not train into the same workdir. The lock is an exclusive
  `flock` on WORKDIR/reproduce.lock: atomic (no two takers), dropped by the kernel when its
  last holder exits (no stale locks), and inherited by the run's trainer (`held_fds`, passed to
  the child), so a harness killed while its trainer goes on does not free the workdir for a
  second trainer. The file stays (unlinking it would let two processes lock two files). A
  bucket results dir (gs://) is not locked; on a network filesystem the lock holds where the
  filesystem supports flock."""
  if "://" in workdir:
    return None
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK_FILE)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    host, _, pid = os.read(fd, 256).decode(errors="replace").strip().partition(" ")
    os.close(fd)
    return (f"running in pid {pid} on {host} (or the trainer it started; its lock: {path})"
            if pid else f"its lock {path} is held")
  os.ftruncate(fd, 0)
  os.write(fd, f"{socket.gethostname()} {os.getpid()}".encode())
  _HELD[workdir] = fd
  return None


def held_fds(workdir: str) -> tuple[int, ...]:
  """The lock descriptor a run's child process inherits (subprocess pass_fds)."""
  return (_HELD[workdir],) if workdir in _HELD else ()


def release(workdir: str) -> None:
  """Drops this process's hold (a trainer that inherited it holds the lock until it exits)."""
  fd = _HELD.pop(workdir, None)
  if fd is not None:
    os.close(fd)

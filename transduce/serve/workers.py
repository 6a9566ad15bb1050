"""`--workers N`: N server processes, each listening on a socket of its own.

uvicorn's supervisor starts the workers, checks their health, replaces one that dies, restarts
them all on SIGHUP and stops them on SIGTERM; `Workers` keeps all of that and changes two
things. uvicorn hands every worker one listening socket, and a worker's event loop accepts every
connection waiting on it each time it wakes, so clients that connect at once mostly land on one
worker, and keep-alive clients stay there: 32 of them split 22+10, 27+5, 19+13, 32+0 between
two workers (benchmarks/serve.md). Here each worker listens on a socket of its own, all bound to
the one address with SO_REUSEPORT, and Linux hands each new connection to one of the sockets by
a hash of the connection's addresses: an even share on average, whichever worker is awake.

A worker's socket closes with it (the supervisor keeps no copy), so no connection waits on a
socket that nobody accepts from; the kernel refuses those still waiting on it when it closes, as
it does for any listening socket. Where sockets have no SO_REUSEPORT, or it spreads nothing
(macOS and the BSDs give one socket every connection), the workers share one, as uvicorn's do
(`spreads`). And either way a worker that dies is replaced at once, not after the health
check's timeout (`Workers._close_handed`)."""

from __future__ import annotations

import logging
import socket
import sys

from uvicorn import Config
from uvicorn.supervisors import Multiprocess

from transduce.errors import UserError

log = logging.getLogger("transduce.serve")


def spreads() -> bool:
    """Whether this system spreads connections over sockets bound with SO_REUSEPORT."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port that other sockets may bind to as well (SO_REUSEPORT), to be
    inherited by a worker: as uvicorn's `Config.bind_socket` makes its one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class Workers(Multiprocess):
    """uvicorn's supervisor of `config.workers` workers, each started with a socket of its own
    (`own_sockets`, by default where the system `spreads` connections over them) or all with
    one, as uvicorn's own.

    uvicorn's `Multiprocess` reads `self.sockets` each time it starts a worker (at start-up,
    for one that died, on SIGHUP); with sockets of their own each read binds a new one. The
    worker inherits it as it starts, after which the supervisor closes its own copy."""

    def __init__(self, config: Config, own_sockets: bool | None = None) -> None:
        self.own_sockets = spreads() if own_sockets is None else own_sockets
        self._port = config.port  # 0 (any): the first socket's, for all
        self._handed: list[socket.socket] = []  # bound for workers being started
        self._shared = None if self.own_sockets else [config.bind_socket()]
        super().__init__(config, sockets=[])

    @property
    def sockets(self) -> list[socket.socket]:
        if self._shared is not None:
            return self._shared
        try:
            sock = listening_socket(self.config.host, self._port)
        except OSError as error:  # checked before the models loaded: taken since
            raise UserError(f"--port {self._port}: cannot listen on {self.config.host}:"
                            f"{self._port}: {error.strerror}") from None
        if self._port == 0:
            self._port = sock.getsockname()[1]
            log.info("listening on port %d", self._port)
        self._handed.append(sock)
        return [sock]

    @sockets.setter
    def sockets(self, value: list[socket.socket]) -> None:
        """(set by uvicorn's constructor: `sockets` is read, never set)"""

    @property
    def port(self) -> int:
        """The port the workers listen on (where it was 0, once one is started)."""
        return self._shared[0].getsockname()[1] if self._shared else self._port

    def init_processes(self) -> None:
        super().init_processes()
        self._close_handed()

    def restart_all(self) -> None:
        super().restart_all()
        self._close_handed()

    def keep_subprocess_alive(self) -> None:
        super().keep_subprocess_alive()
        self._close_handed()

    def _close_handed(self) -> None:
        """The supervisor's copies of what it handed to the workers it started, which hold
        their own (a spawned process is given its descriptors as it starts): their sockets of
        their own, and the worker's end of each health-check pipe. uvicorn keeps that end
        open, so a ping to a worker killed as it was pinged (its process not yet gone when the
        supervisor looked) waited out the whole health-check timeout, 120 s, before the worker
        was replaced; with the end closed, the worker's exit ends the ping at once."""
        for sock in self._handed:
            sock.close()
        self._handed.clear()
        for process in self.processes:
            process.child_conn.close()  # (closing twice is nothing)

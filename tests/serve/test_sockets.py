"""`--workers`: uvicorn's supervisor with each worker's own socket or one shared
(transduce.serve.workers), in this process, both ways on any system, and `serve` starting it
(the servers themselves: tests/serve/test_workers.py)."""

import signal
import socket

import pytest
import uvicorn
from uvicorn.supervisors.multiprocess import SIGNALS

from transduce.cli import main
from transduce.errors import UserError
from transduce.serve import workers
from transduce.serve.app import MODELS_VARIABLE, SETTINGS_VARIABLE
from transduce.serve.metrics import MULTIPROCESS
from transduce.serve.workers import Workers

REUSEPORT = pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"),
                               reason="this system's sockets have no SO_REUSEPORT")


@pytest.fixture
def handlers():
    """The signal handlers uvicorn's supervisor sets as it is made (it queues signals), and
    `serve`'s, put back after."""
    before = {s: signal.getsignal(s) for s in SIGNALS}
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


def _supervisor(own_sockets: bool, port: int = 0) -> Workers:
    """Workers for two workers on `port` (0: any free one), none started."""
    config = uvicorn.Config("transduce.serve:create_app", factory=True, workers=2,
                            host="127.0.0.1", port=port, log_config=None)
    return Workers(config, own_sockets=own_sockets)


def _accepted_by(listening: list[socket.socket], port: int) -> int:
    """How many of `listening` accept a connection made to `port`."""
    accepted = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        for sock in listening:
            sock.settimeout(0.5)
            try:
                sock.accept()[0].close()
                accepted += 1
            except TimeoutError:
                pass
    return accepted


@REUSEPORT
def test_each_worker_started_gets_a_socket_of_its_own_on_one_port(handlers):
    supervisor = _supervisor(own_sockets=True)
    (first,), (second,) = supervisor.sockets, supervisor.sockets
    assert first.fileno() != second.fileno() and first.fileno() >= 0
    assert first.getsockname() == second.getsockname() == ("127.0.0.1", supervisor.port)
    assert supervisor.port != 0 and first.get_inheritable() and second.get_inheritable()
    for sock in (first, second):
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
        sock.listen()
    assert _accepted_by([first, second], supervisor.port) == 1  # both listen: one takes it
    supervisor._close_handed()  # as it does once the workers are started
    assert first.fileno() == second.fileno() == -1
    with pytest.raises(ConnectionRefusedError):  # the supervisor keeps no copy listening
        socket.create_connection(("127.0.0.1", supervisor.port), timeout=10)


def test_workers_share_one_socket_where_the_system_spreads_nothing(handlers):
    supervisor = _supervisor(own_sockets=False)
    (first,), (second,) = supervisor.sockets, supervisor.sockets
    assert first is second and first.get_inheritable()
    assert first.getsockname() == ("127.0.0.1", supervisor.port) and supervisor.port != 0
    first.listen()
    supervisor._close_handed()  # the shared socket stays for the workers started later
    assert _accepted_by([first], supervisor.port) == 1
    first.close()


@REUSEPORT
def test_a_port_taken_by_another_program_is_refused_in_one_line(handlers):
    with socket.socket() as taken:  # another program's socket, bound without SO_REUSEPORT
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"--port {port}: cannot listen on 127.0.0.1:{port}"):
            list(_supervisor(own_sockets=True, port=port).sockets)


@pytest.mark.parametrize("spreads", [True, False])
def test_serve_gives_the_workers_sockets_of_their_own_where_the_system_spreads(
        monkeypatch, run_dir, handlers, spreads):
    ran = {}
    for name in (MODELS_VARIABLE, SETTINGS_VARIABLE, MULTIPROCESS):  # what serve sets for the
        monkeypatch.setenv(name, "")  # workers: as it was after the test (set, then unset)
        monkeypatch.delenv(name)
    monkeypatch.setattr(workers, "spreads", lambda: spreads)
    monkeypatch.setattr(Workers, "run", lambda self: ran.update(
        own_sockets=self.own_sockets, workers=self.config.workers, app=self.config.app))
    assert main(["serve", "--model", str(run_dir), "--port", "0", "--workers", "2"]) == 0
    assert ran == {"own_sockets": spreads, "workers": 2, "app": "transduce.serve:create_app"}

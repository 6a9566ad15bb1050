"""A real server: `transduce serve` on 127.0.0.1, real client libraries, many clients at once,
and SIGTERM while it works."""

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from libretranslate_aio import AsyncLibreTranslate
from libretranslatepy import LibreTranslateAPI
from num2words import num2words

from transduce.cli import main

pytestmark = pytest.mark.slow  # starts real server processes

START_WITHIN = 180  # seconds a server may take to answer /health


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(run_dir, tmp_path):
    """Start `transduce serve --model RUN_DIR` (more options through the factory's argument)."""
    started = []

    def start(*options, env: dict[str, str] | None = None):
        port = _free_port()
        log = open(tmp_path / f"server-{port}.log", "w")
        process = subprocess.Popen(
            [sys.executable, "-m", "transduce", "serve", "--model", str(run_dir), "--port",
             str(port), *options], stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True)  # its own process group: workers included, below
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        # a server compiling its search at start-up (--compile), on a 2-core machine that two
        # test workers share: 60 s was not always enough there
        deadline = time.monotonic() + START_WITHIN
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError((tmp_path / f"server-{port}.log").read_text())
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    return process, url
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"the server did not start in {START_WITHIN} s")

    yield start
    for process in started:  # the server and its workers (a SIGKILL to it alone orphans them)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _translate_command(run_dir, lines, tmp_path) -> list[str]:
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(run_dir), "-i", str(source), "-o", str(output)]) == 0
    return output.read_text(encoding="utf-8").splitlines()


async def _one_request_per_line(url, lines):
    """All lines at once, each a request of its own."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await asyncio.gather(*(
            client.post("/translate", json={"q": line, "source": "en", "target": "de"})
            for line in lines))


def test_libretranslatepy_and_libretranslate_aio(server, translator):
    _, url = server()
    client = LibreTranslateAPI(url + "/")
    assert {"code": "en", "name": "English", "targets": ["de"]} in client.languages()
    assert client.translate("forty-two", "en", "de") == translator.translate(["forty-two"])[0]

    async def aio():
        async with AsyncLibreTranslate(base_url=url) as aio_client:
            settings = await aio_client.frontend_settings()
            batch = await aio_client.translate(["seven", "twelve"], "en", "de")
            return settings, batch
    settings, batch = asyncio.run(aio())
    assert settings.char_limit == 5000 and settings.language.source.code == "en"
    assert batch.translated_text == translator.translate(["seven", "twelve"])


@pytest.mark.parametrize("batching", [["--batch-wait-ms", "20"],
                                      ["--continuous-batching", "--max-search-sentences", "8",
                                       "--searches", "2", "--threads", "2", "--compile"]])
def test_64_concurrent_requests_get_what_translate_gives(server, run_dir, tmp_path, batching):
    """Batches, and continuous batching in two searches at once, compiled: warmed for them
    before /health (two searches: on one thread each, a count Dynamo's guards hold; each its
    own copy of the compiled steps, whose guards two threads cannot check at once), so that
    nothing is compiled while serving."""
    lines = [num2words(n) for n in range(1, 1000, 15)][:64]
    expected = _translate_command(run_dir, lines, tmp_path)
    _, url = server(*batching, env=dict(TORCH_LOGS="recompiles,graph_code"))
    log = tmp_path / f"server-{url.rsplit(':', 1)[1]}.log"
    warmed = log.read_text()  # up to /health

    responses = asyncio.run(_one_request_per_line(url, lines))
    assert [r.status_code for r in responses] == [200] * 64
    assert [r.json()["translatedText"] for r in responses] == expected
    if "--compile" in batching:
        assert "TRACED GRAPH" in warmed and "TRACED GRAPH" not in log.read_text()[len(warmed):]
    _metric_reaches(url, 'transduce_sentences_total{model="en-de"}', 64)  # all counted
    searched = _metric(url, 'transduce_batch_sentences_sum{model="en-de"}')
    steps = _metric(url, 'transduce_batch_sentences_count{model="en-de"}')
    assert searched / steps > 1  # sentences of several requests searched together


@pytest.mark.parametrize("searching", [[], ["--continuous-batching", "--searches", "2",
                                             "--threads", "2"]])
def test_sigterm_finishes_the_accepted_requests_then_exits_0(server, searching):
    """One search of batches; continuous batching in two searches at once."""
    process, url = server("--max-texts", "-1", "--max-chars", "-1", *searching)
    texts = [num2words(n) for n in range(300, 600)]
    n = 12

    async def clients():
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            sent = [asyncio.ensure_future(client.post(
                "/translate", json={"q": texts, "source": "en", "target": "de"}))
                for _ in range(n)]
            await _until_in_progress(client, n)  # the server holds all of them
            os.kill(process.pid, signal.SIGTERM)
            return await asyncio.gather(*sent)
    responses = asyncio.run(clients())
    assert [r.status_code for r in responses] == [200] * n
    assert all(len(r.json()["translatedText"]) == len(texts) for r in responses)
    assert process.wait(timeout=60) == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health")


def test_a_client_that_leaves_costs_the_others_nothing(server):
    """One request at a time (--no-batching): while the first is translated, the second waits
    in the queue; its client leaves; it is never translated, and the third is answered."""
    _, url = server("--no-batching", "--max-texts", "-1", "--max-chars", "-1")
    # the first long enough to be in progress when the second arrives, on a loaded CI machine
    # too (400 sentences were once translated before the second was read)
    first = [num2words(n) for n in range(300, 1500)]
    second = [num2words(n) for n in range(1500, 1600)]

    async def clients():
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            a = asyncio.ensure_future(client.post(
                "/translate", json={"q": first, "source": "en", "target": "de"}))
            await _until_in_progress(client, 1)
            async with httpx.AsyncClient(base_url=url, timeout=120) as leaving:
                b = asyncio.ensure_future(leaving.post(
                    "/translate", json={"q": second, "source": "en", "target": "de"}))
                await _until_in_progress(client, 2)
                b.cancel()  # and its connection closes with its client
            c = await client.post("/translate", json={"q": "seven", "source": "en",
                                                      "target": "de"})
            return await a, c
    a, c = asyncio.run(clients())
    assert a.status_code == c.status_code == 200
    # the count follows each batch's answers: had the second been translated (before the third,
    # one at a time), its 100 would be there by the time the third's sentence is
    translated = _metric_reaches(url, 'transduce_sentences_total{model="en-de"}',
                                 len(first) + 1)
    assert translated == len(first) + 1  # not the second's 100


def _metric(url, name) -> float:
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return next((float(line.split()[-1]) for line in lines if line.startswith(name + " ")), 0.0)


def _metric_reaches(url, name, value, seconds=30) -> float:
    """The metric once it is at least `value` (it is updated just after the answers go out)."""
    deadline = time.monotonic() + seconds
    while (now := _metric(url, name)) < value and time.monotonic() < deadline:
        time.sleep(0.02)
    return now


async def _until_in_progress(client, n):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if f"transduce_requests_in_progress {n:.1f}" in (await client.get("/metrics")).text:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {n} requests in progress")


def test_several_workers_answer_as_one_and_stop_on_sigterm(server, run_dir, tmp_path):
    lines = [num2words(n) for n in range(5, 1000, 31)]
    expected = _translate_command(run_dir, lines, tmp_path)
    process, url = server("--workers", "2")

    responses = asyncio.run(_one_request_per_line(url, lines))
    assert [r.json()["translatedText"] for r in responses] == expected
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == 0


def test_serve_dtype_int8_batches_requests_as_translate_dtype_int8(server, run_dir, tmp_path):
    # per-row activation scales: a line's translation is the same whatever it is batched with
    lines = [num2words(n) for n in range(3, 1000, 41)]
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(run_dir), "--dtype", "int8", "--max-tokens", "16",
                 "-i", str(source), "-o", str(output)]) == 0
    _, url = server("--dtype", "int8", "--batch-wait-ms", "20")
    responses = asyncio.run(_one_request_per_line(url, lines))
    assert [r.json()["translatedText"] for r in responses] == output.read_text().splitlines()


# serve's search options (those it shares with translate), each with a value: the device's
# each in a server of its own, DecodeConfig's all together in one
DEVICE_OPTIONS = {"--device": ["--device", "cpu"], "--dtype": ["--dtype", "bfloat16"],
                  "--compile": ["--compile"],
                  "--engine": ["--engine", "ctranslate2", "--length-normalization", "power",
                               "--stopping", "finished"]}
DECODE_OPTIONS = {"--beam-size": "3", "--length-penalty": "1.5", "--length-normalization": "power",
                  "--stopping": "exact", "--max-len-a": "0.5", "--max-len-b": "4",
                  "--min-len": "2", "--renormalize": None, "--max-tokens": "16"}


def test_the_search_options_tables_hold_every_search_option_serve_lists():
    from ..test_every_option import listed

    # (--split-sentences: the same in both, tested in tests/serve/test_documents.py;
    # --searches: a worker's, requests spread over them, tested in tests/serve/test_spread.py)
    shared = listed("serve") & listed("translate") - {"--model", "--help", "--split-sentences",
                                                      "--searches"}
    assert shared == set(DEVICE_OPTIONS) | set(DECODE_OPTIONS)


def _lines_alone(url: str, lines: list[str]) -> list[str]:
    with httpx.Client(base_url=url, timeout=300) as client:
        return [client.post("/translate", json={"q": line, "source": "en", "target": "de"}
                            ).json()["translatedText"] for line in lines]


@pytest.mark.parametrize("option", sorted(DEVICE_OPTIONS))
def test_serve_runs_with_each_device_option(option, server, run_dir, tmp_path):
    """Each line alone (one request at a time): what Translator gives with the same setting
    (with --compile, what the eager search gives: the compiled one finds its tokens, and a
    second compilation here would cost tens of seconds). A compiled server is warm before it
    answers /health (transduce.serve.models `warm`): batches of any size and length compile
    nothing more (Dynamo logs each graph it traces, `TORCH_LOGS=graph_code`, and why it
    compiles a function again, `recompiles`), and answer what their sentences get alone."""
    from transduce.engines import engine

    compiling = option == "--compile"
    _, url = server(*DEVICE_OPTIONS[option],
                    env=dict(TORCH_LOGS="recompiles,graph_code") if compiling else None)
    log = tmp_path / f"server-{url.rsplit(':', 1)[1]}.log"
    warmed = log.read_text() if compiling else ""  # up to /health
    lines = ["seven", "three hundred and twelve", "forty-one"]
    load = {"--device": dict(device="cpu"), "--dtype": dict(dtype="bfloat16"),
            "--compile": dict(compile=False), "--engine": dict(engine="ctranslate2")}[option]
    search = dict(length_normalization="power", stopping="finished") if option == "--engine" \
        else {}
    assert _lines_alone(url, lines) == engine.load(run_dir, **load).translate(lines, **search)
    if compiling:
        # warmed on a batch of one source and one of two, a graph each (Dynamo specialises 1)
        assert "compiled the search of" in warmed and warmed.count("TRACED GRAPH") >= 2
        words = "three hundred and twelve thousand and forty-one".split()
        rng = random.Random(0)
        with httpx.Client(base_url=url, timeout=300) as client:
            for _ in range(20):  # batches of sentences that end at different steps
                batch = [" ".join(rng.choices(words, k=rng.randint(1, 30)))
                         for _ in range(rng.randint(1, 32))]
                got = client.post("/translate", json={"q": batch, "source": "en",
                                                      "target": "de"}).json()["translatedText"]
                assert got == _lines_alone(url, batch)  # as each alone
        assert "TRACED GRAPH" not in log.read_text()[len(warmed):]  # nothing compiled since


def test_serve_searches_as_its_decode_options_say(server, run_dir):
    """Every DecodeConfig option at once, over the model's own decode section: what Translator
    gives with the same settings (and not what it gives with the model's own)."""
    from transduce.decoding.translator import Translator

    args = [word for option, value in DECODE_OPTIONS.items()
            for word in ([option] if value is None else [option, value])]
    _, url = server(*args)
    lines = ["seven", "three hundred and twelve", "forty-one", "one thousand and one"]
    translator = Translator.load(run_dir)
    settings = dict(beam_size=3, length_penalty=1.5, length_normalization="power",
                    stopping="exact", max_len_a=0.5, max_len_b=4, min_len=2, renormalize=True,
                    max_tokens=16)
    served = _lines_alone(url, lines)
    assert served == translator.translate(lines, **settings)
    assert served != translator.translate(lines)


def test_serve_refuses_a_port_in_use_before_it_says_serving(run_dir, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(run_dir), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}: in use by another program" in err
    assert "serving on" not in err


def test_serve_refuses_a_missing_model_before_it_says_serving(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path / "nothing"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("transduce: error:") and "nothing" in err and len(err.splitlines()) == 1


def test_a_slow_body_is_dropped_after_the_body_timeout_and_big_ones_refused(server):
    """A client that sends part of its body and then nothing gets a 408 once --body-timeout has
    passed, and its connection is closed; one whose Content-Length is over --max-body-bytes gets
    a 413 at once; the server goes on serving."""
    _, url = server("--body-timeout", "1", "--max-body-bytes", "5000")
    port = int(url.rsplit(":", 1)[1])
    head = ("POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: {}\r\n\r\n")
    for length, sent, status in ((100, b'{"q": "sev', b"408"), (10**8, b"", b"413")):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
            slow.sendall(head.format(length).encode() + sent)
            start = time.monotonic()
            answer = b""
            while chunk := slow.recv(4096):  # until the server closes the connection
                answer += chunk
            assert answer.split(b"\r\n")[0].split()[1] == status, answer
            assert time.monotonic() - start < 20
    with httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/translate", json={"q": "seven", "source": "en", "target": "de"})
        assert answer.status_code == 200

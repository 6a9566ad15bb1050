"""What the documentation's commands become when the tests run them (tests/test_doc_commands.py)
and what cannot run as written in a test: a server, which runs until stopped, and `pip install`,
which would change the environment under test.

    python -m tests.docs_stand_ins serve PROGRAM ARGS...   # transduce serve, uvicorn, gunicorn
    python -m tests.docs_stand_ins pip install -e ".[serve]"

`serve` starts the server on a free port of 127.0.0.1, waits for /health, translates one sentence
through LibreTranslate's API into every target of /languages, then sends SIGTERM and requires a
clean exit (0; uvicorn ends by the signal it shut down for). `pip` checks that the extras named
exist in pyproject.toml and that every requirement they bring is installed, without installing
anything.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from packaging.requirements import Requirement


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def serve(argv: list[str]) -> int:
    port = _free_port()
    program = os.path.basename(argv[0])
    if program == "gunicorn":
        argv = [argv[0], "-b", f"127.0.0.1:{port}", *argv[1:]]
    else:  # transduce serve and uvicorn: the last --host/--port wins
        argv = [*argv, "--host", "127.0.0.1", "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(argv, stdout=sys.stdout, stderr=sys.stderr)
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                print(f"{' '.join(argv)}: exited with {server.returncode} before serving",
                      file=sys.stderr)
                return 1
            try:
                if _get(base + "/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                print(f"{base}/health did not answer within 180 s", file=sys.stderr)
                return 1
            time.sleep(0.5)
        status, body = _get(base + "/languages")
        assert status == 200, (status, body)
        for language in json.loads(body):
            for target in language["targets"]:
                form = urllib.parse.urlencode({"q": "Hello world.", "source": language["code"],
                                               "target": target}).encode()
                request = urllib.request.Request(base + "/translate", data=form)
                with urllib.request.urlopen(request, timeout=120) as answer:
                    translated = json.loads(answer.read())["translatedText"]
                assert isinstance(translated, str), translated
                print(f"{language['code']} -> {target}: {translated!r}")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    # uvicorn, once shut down, re-raises the signal to end as it would have (since 0.29)
    clean = (0, -signal.SIGTERM) if program == "uvicorn" else (0,)
    if code not in clean:
        print(f"{' '.join(argv)}: exit code {code} after SIGTERM", file=sys.stderr)
        return 1
    return 0


def pip(argv: list[str]) -> int:
    targets = [a for a in argv[1:] if not a.startswith("-")]
    if argv[:1] != ["install"] or not targets:
        print(f"pip {' '.join(argv)}: only `pip install` of this project is understood here",
              file=sys.stderr)
        return 1
    declared = set(importlib.metadata.metadata("transduce").get_all("Provides-Extra") or [])
    requires = [Requirement(r) for r in importlib.metadata.requires("transduce") or []]
    for target in targets:
        match = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", target)
        if not match:
            print(f"pip install {target}: not this project", file=sys.stderr)
            return 1
        for extra in (match.group(1) or "").split(",") if match.group(1) else []:
            if extra not in declared:
                print(f"pip install {target}: no extra {extra!r} (there are {sorted(declared)})",
                      file=sys.stderr)
                return 1
            for requirement in requires:
                if requirement.marker and requirement.marker.evaluate({"extra": extra}):
                    try:
                        version = importlib.metadata.version(requirement.name)
                    except importlib.metadata.PackageNotFoundError:
                        print(f"{extra}: {requirement.name} is not installed", file=sys.stderr)
                        return 1
                    if not requirement.specifier.contains(version, prereleases=True):
                        print(f"{extra}: {requirement.name} {version} is not {requirement}",
                              file=sys.stderr)
                        return 1
            print(f"extra [{extra}]: declared, and everything it needs is installed")
    return 0


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    sys.exit({"serve": serve, "pip": pip}[command](rest))

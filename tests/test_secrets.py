"""Secrets are never written: a key a server echoes, a URL's credentials in any form and echoed auth
headers reach no file, log or W&B run; credentials in an engine's URL are refused before anything is
written."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import apm.records.redact as redact_module
from apm.backbones.openai_api import OpenAIBackbone
from apm.records import judging
from apm.records.judging import UNSIGNED, content_digest
from apm.records.redact import redact, redact_data, register_config_secrets, register_secret
from apm.synth import generate

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-test-0123456789abcdefSECRET"
TOKEN = "tok-URLTOKEN-0123456789"
USERINFO_FORMS = {
    "a token alone": (f"http://{TOKEN}@127.0.0.1:9/v1", [TOKEN]),
    "user and password": ("https://alice:hunter2-PASSWORD-9876@127.0.0.1:9/v1", ["hunter2-PASSWORD-9876"]),
    "a raw @ in the password": ("http://alice:p@ss-RAWAT-0123456@127.0.0.1:9/v1", ["p@ss-RAWAT-0123456", "ss-RAWAT"]),
    "percent-encoded": ("http://alice:p%40ss-PCT-0123456@127.0.0.1:9/v1", ["p%40ss-PCT-0123456", "ss-PCT"]),
}
"""Each URL, and the parts of its credentials that must never be seen."""


def _forms(secret: str) -> list[str]:
    """The forms of ``secret`` an echo could take: raw, percent-encoded, base64 (unpadded)."""
    return [secret, quote(secret, safe=""), base64.b64encode(secret.encode()).decode().rstrip("=")]


@pytest.mark.parametrize("form", USERINFO_FORMS)
def test_url_userinfo_in_every_form_is_masked(form: str) -> None:
    url, secrets = USERINFO_FORMS[form]
    clean = redact(f"GET {url}/models failed; retrying {url}")
    assert clean.count("://***@127.0.0.1:9/v1") == 2, clean
    assert not [s for s in secrets if s in clean]


def test_an_echo_of_url_credentials_is_masked_once_the_config_is_registered() -> None:
    register_config_secrets({"memory": {"hooks": ["http://alice:p%40ss-ECHOED-0123@host/x"]}})
    basic = base64.b64encode(b"alice:p@ss-ECHOED-0123").decode()
    for echo in ("wrong password p@ss-ECHOED-0123", f"credentials {basic} refused", "as given: p%40ss-ECHOED-0123"):
        clean = redact(echo)
        assert "ECHOED" not in clean and basic.rstrip("=") not in clean, clean


def test_echoed_auth_headers_are_scrubbed_registered_or_not() -> None:
    basic = base64.b64encode(b"bob:correct-horse-42").decode()
    clean = redact(f"401: {{'Authorization': 'Basic {basic}'}}; Authorization: Bearer sk-unregistered-42abc")
    assert basic not in clean and "sk-unregistered-42abc" not in clean and clean.count("***") == 2, clean
    prose = "Basic ingredients: flour. The Bearer of good news."
    assert redact(prose) == prose


def test_a_registered_key_is_masked_in_its_encoded_forms() -> None:
    key = "sk-enc/0123+456789?=&"
    register_secret(key)
    for form in _forms(key):
        assert redact(f"echo {form} end") == "echo *** end"


def test_every_api_key_variable_in_a_config_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APM_NESTED_WRITER_KEY", "nested-writer-key-0042")
    register_config_secrets({"memory": {"writer": {"api_key_env": "APM_NESTED_WRITER_KEY"}}})
    assert redact("echo nested-writer-key-0042") == "echo ***"


@pytest.mark.parametrize("form", USERINFO_FORMS)
def test_an_engine_refuses_credentials_in_its_url(form: str) -> None:
    url, secrets = USERINFO_FORMS[form]
    with pytest.raises(ValueError, match="credentials in the URL .* are refused") as refused:
        OpenAIBackbone(model="m", base_url=url, api_key_env="APM_TEST_KEY")
    assert not [s for s in secrets if s in str(refused.value)] and "api_key_env" in str(refused.value)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=5, scale="tiny")


def _serve(*flags: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--port", "0", *flags],
                              stdout=subprocess.PIPE, text=True, env=env)
    line = server.stdout.readline()
    assert line.startswith("PORT "), line
    return server, int(line.split()[1])


def _run(tiny: Path, tmp: Path, base_url: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    """``apm-run`` of an OpenAI-compatible backbone at ``base_url`` (``memory=none`` unless ``extra`` names one)."""
    memory = [] if any(e.startswith("memory=") for e in extra) else ["memory=none"]
    return subprocess.run(
        [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={tmp / 'runs'}",
         f"frames.cache_dir={tmp / 'cache'}", "logging.progress=false", "logging.wandb.mode=offline",
         *memory, "backbone=openai_compatible", f"backbone.base_url={base_url}", "backbone.model=m",
         "backbone.api_key_env=APM_TEST_KEY", "dataset.limit=6", "preflight=false", *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


def _leaks(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def _command(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def test_no_byte_written_by_any_stage_holds_a_secret(tiny: Path, tmp_path: Path) -> None:
    """An echoing server and a token in a URL of the config; then the report (with its W&B runs), the
    site and the published W&B runs: no file anywhere holds the key or the token, in any form."""
    env = {**os.environ, "APM_TEST_KEY": KEY, "WANDB_SILENT": "true"}
    server, port = _serve("--echo-headers", env=env)
    try:
        done = _run(tiny, tmp_path, f"http://127.0.0.1:{port}/v1", env,
                    f"+backbone.extra_body.callback=http://{TOKEN}@hooks.example/x")
    finally:
        server.terminate()
        server.wait(timeout=30)
    records = list((tmp_path / "runs").rglob("records/*.jsonl"))
    assert records and done.returncode == 1, done.stderr  # every instance refused, quoting the key
    assert "Authorization: Bearer ***" in records[0].read_text()
    _assert_no_stage_leaks(tmp_path, done, env)


def _assert_no_stage_leaks(tmp_path: Path, done: subprocess.CompletedProcess, env: dict[str, str]) -> None:
    """After the run ``done`` under ``tmp_path/runs``: the report (with its W&B runs), the site and the
    published W&B runs; no file anywhere, and nothing any stage said, holds the key or the token, in any form."""
    said = [done]
    runs = str(tmp_path / "runs")
    said.append(_command("apm.cli.reduce", runs, "--out", str(tmp_path / "report"), "--no-figures", "--bootstrap",
                         "0", "--wandb", "--wandb-mode", "offline", "--wandb-dir", str(tmp_path / "reported"),
                         "--allow-unjudged", env=env))
    said.append(_command("apm.cli.view", runs, "--out", str(tmp_path / "site"), env=env))
    said.append(_command("apm.cli.publish", runs, "--dir", str(tmp_path / "published"), "--bootstrap", "0", env=env))
    assert [d.returncode for d in said[1:]] == [0, 0, 0], [d.stderr[-500:] for d in said[1:]]
    assert any((tmp_path / "site").rglob("*.js"))
    live, report, published = (list(where.rglob("offline-run-*")) for where in
                               (next((tmp_path / "runs").rglob("records")).parent / "wandb", tmp_path / "reported",
                                tmp_path / "published"))
    assert live and report and published  # the W&B offline folders of every stage are among the bytes read
    for secret in (*_forms(KEY), *_forms(TOKEN)):
        assert not [d for d in said if secret in d.stdout + d.stderr]
        assert not _leaks(tmp_path, secret), secret


def test_a_key_in_a_models_answer_reaches_no_file(tiny: Path, tmp_path: Path) -> None:
    """A model that answers with the key (the backbone's and the summary writer's replies): the text
    summaries, the prompt store (later prompts quote the summaries), the site and the W&B tables of
    every stage hold it masked, as the records do."""
    env = {**os.environ, "APM_TEST_KEY": KEY, "WANDB_SILENT": "true"}
    server, port = _serve("--reply", f"A. The code on the note reads {KEY}.", env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        done = _run(tiny, tmp_path, base_url, env, "memory=text_summary", "+backbone@writer=openai_compatible",
                    f"writer.base_url={base_url}", "writer.model=m", "writer.api_key_env=APM_TEST_KEY",
                    )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    notes = [p for p in (tmp_path / "runs").rglob("memory_state/*/*") if p.is_file()]
    assert notes and all("***" in p.read_text() for p in notes)
    assert any("***" in p.read_text() for p in (tmp_path / "runs").rglob("prompts/**/*") if p.is_file())
    _assert_no_stage_leaks(tmp_path, done, env)


@pytest.mark.parametrize("form", USERINFO_FORMS)
def test_credentials_in_an_engine_url_are_refused_before_anything_is_written(tiny: Path, tmp_path: Path,
                                                                             form: str) -> None:
    url, secrets = USERINFO_FORMS[form]
    done = _run(tiny, tmp_path, url, {**os.environ, "APM_TEST_KEY": KEY})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "backbone.base_url: credentials in the URL" in done.stderr and "backbone.api_key_env" in done.stderr
    assert not [s for s in secrets if s in done.stdout + done.stderr]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("backbone.api_key_env=sk-live-abcdef0123456789", "the name of an environment variable, not a key"),
    ("+backbone.api_key=sk-live-abcdef0123456789", "a key is never written in a config"),
])
def test_a_key_written_into_the_config_is_refused(tiny: Path, tmp_path: Path, override: str, message: str) -> None:
    done = _run(tiny, tmp_path, "http://127.0.0.1:9/v1", {**os.environ, "APM_TEST_KEY": KEY}, override)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "sk-live-abcdef0123456789" not in done.stderr + done.stdout
    assert not (tmp_path / "runs").exists()


def _digest_of_the_masked_line(judgement: dict) -> str:
    """The content digest as its definition states it: every string masked, then serialised and hashed."""
    body = {k: v for k, v in judgement.items() if k not in UNSIGNED}
    return hashlib.sha256(json.dumps(redact_data(body), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@pytest.mark.parametrize("escaped_secret", [False, True], ids=["plain secrets", "a secret JSON escapes"])
@pytest.mark.parametrize("text", ["a plain reason, 'quoted' and \"double\"", f"the server echoed {KEY}",
                                  f"see http://{TOKEN}@127.0.0.1:9/v1", "Authorization: Bearer abcdefgh12345678",
                                  'quote"in-the-KEY-0123456789', "ünïcode ✓ and a \\ backslash"])
def test_a_judgements_content_digest_is_that_of_its_masked_line(text: str, escaped_secret: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """content_digest skips masking when no string could change (most lines): the digest is the same."""
    monkeypatch.setattr(redact_module, "_secrets", [])  # only this test's secrets
    register_secret(KEY)
    if escaped_secret:  # JSON escapes its quote, so it may not appear as itself: masking stays on
        register_secret('quote"in-the-KEY-0123456789')
    line = {"key": "syn-ER-01", "reason": text, "checks": {text: "pass"}, "score": 4, "revision": 3}
    assert content_digest(line) == _digest_of_the_masked_line(line)
    assert content_digest(line) != content_digest({**line, "score": 5})


@pytest.mark.parametrize("text", ["a plain reason", f"the server echoed {KEY}", judging._RUN_MARK,
                                  judging._RUN_MARK * 2, judging.sorted_json(judging._RUN_MARK)])
@pytest.mark.parametrize("run", [{"memory": "none", "overrides": {"k": "ü"}}, {"memory": f"see {KEY}"}, {}, None])
def test_a_digest_given_its_run_blocks_text_is_the_digest_of_the_line(text: str, run: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader serialises each run block once and splices it into every line's text: the same digest,
    whatever the line holds (a secret in the block or beside it, the splice's own mark in another field)."""
    monkeypatch.setattr(redact_module, "_secrets", [])
    register_secret(KEY)
    line = {"key": "syn-ER-01", "run": run, "reason": text, "checks": {text: "pass"}, "score": 4, "revision": 3}
    given = content_digest(line, judging.sorted_json(run))
    assert given == content_digest(line) == _digest_of_the_masked_line(line)
    assert content_digest({**line, "score": 5}, judging.sorted_json(run)) != given

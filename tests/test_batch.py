"""``hasrctl batch`` on a real local Ray (2 CPU actors): real faster-whisper on real speech, the daemon's text, the
manifest, reruns, an actor killed with SIGKILL, Ctrl-C, and every refusal before Ray starts."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cliutil import REPO, cli_env, hasrctl, show
from conftest import wait_until
from speech import DATA

pytest.importorskip("ray", reason="the batch extra: pip install '.[batch]'")

CLIPS = ["en_hello_world", "en_quick_brown_fox", "en_espeak_park", "zh_jishu", "zh_nihao_shijie", "zh_pangrama"]


def _ffmpeg(src: Path, dst: Path, *args: str) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(src), *args, str(dst)], check=True)


@pytest.fixture(scope="module")
def corpus(module_tmp: str) -> Path:
    """8 clips (English and Mandarin, FLAC, WAV, MP3, M4A without the right suffix) in a tree, a broken WAV and
    a text file: 9 inputs for batch, the text file left out by content."""
    root = Path(module_tmp) / "corpus"
    for i, name in enumerate(CLIPS):
        sub = root / ("en" if name.startswith("en") else "zh") / ("deep" if i % 3 == 2 else "")
        sub.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / f"{name}.flac", sub / f"{name}.flac")
    _ffmpeg(DATA / "zh_jishu.flac", root / "zh" / "zh_jishu.mp3")  # same stem as zh_jishu.flac: no collision
    _ffmpeg(DATA / "en_quick_brown_fox.flac", root / "en" / "fox.data", "-c:a", "aac", "-f", "mp4")  # by content
    (root / "broken.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + os.urandom(200))
    (root / "notes.txt").write_text("not audio\n")
    return root


def _ray_env(base: str, **extra: str) -> dict[str, str]:
    """cli_env with a Ray temporary directory of this test's own: Ray's processes inherit it, so a test finds its
    own Ray processes (and no other run's on the same machine) by their environment."""
    return cli_env(base, RAY_TMPDIR=os.path.join(base, "r"), **extra)


def _env(base: str, **extra: str) -> dict[str, str]:
    return _ray_env(base, HASR_ENGINE="auto", HASR_FW_DEVICE="cpu", HASR_IDLE_EXIT_SEC="30", **extra)


def _ray_log(out: Path) -> str:
    """The run's own Ray log (its C++ core's lines, and anything the driver printed while Ray held its stderr), for
    a failure's message: why the driver ended where its stderr says nothing."""
    log = out / ".hasr-batch.ray.log"
    return f"\n{log.name}:\n{log.read_text(errors='replace')[-6000:]}" if log.exists() else f"\nno {log.name}"


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def _ours(pid: int, env: dict[str, str]) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"RAY_TMPDIR={env['RAY_TMPDIR']}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _pids(pattern: str, env: dict[str, str]) -> set[int]:
    res = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return {int(p) for p in res.stdout.split() if _ours(int(p), env)}


def _ray_processes(env: dict[str, str]) -> set[int]:
    """The Ray processes a run with ``env`` started (its raylet, GCS, agents, workers and actors)."""
    return _pids("raylet|gcs_server|ray::", env)


@pytest.fixture(scope="module")
def first_run(module_tmp: str, corpus: Path) -> tuple[Any, Path, dict[str, str]]:
    env = _env(os.path.join(module_tmp, "e1"))
    out = Path(module_tmp) / "out"
    res = hasrctl("batch", str(corpus), "-o", str(out), "-f", "txt,srt,json", "--workers", "2", "--no-progress",
                  env=env, timeout=600)
    assert wait_until(lambda: not _ray_processes(env), 30), "Ray's processes outlived the run"
    return res, out, env


def test_batch_records_nine_rows_eight_ok_one_failed_and_exits_1(first_run: Any, corpus: Path) -> None:
    res, out, _env = first_run
    assert res.returncode == 1, show(res)
    rows = _rows(out)
    assert len(rows) == 9 and len({r["path"] for r in rows}) == 9
    by_name = {os.path.relpath(r["path"], corpus): r for r in rows}
    assert "notes.txt" not in by_name
    bad = by_name["broken.wav"]
    assert bad["status"] == "failed" and bad["error"]["code"] == "undecodable", bad
    assert "broken.wav" in res.stderr and "1 of 9 file(s) failed" in res.stderr
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 8
    for r in ok:
        assert r["hash"].startswith("sha256:") and r["duration_s"] > 0 and r["text"].strip()
        assert r["model"] == "base" and r["engine"] == "whisper" and r["host"] and r["pid"]
        assert set(r["timings"]) >= {"decode_s", "transcribe_s", "total_s"}
        assert r["language"] in ("English", "Chinese"), r
    assert len({r["pid"] for r in ok}) == 2, "two actors shared the files"


def test_outputs_mirror_the_tree_and_names_never_collide(first_run: Any, corpus: Path) -> None:
    _res, out, _env = first_run
    rows = {os.path.relpath(r["path"], corpus): r for r in _rows(out)}
    assert rows["en/en_hello_world.flac"]["outputs"] == ["en/en_hello_world.txt", "en/en_hello_world.srt",
                                                         "en/en_hello_world.json"]
    assert rows["en/deep/en_espeak_park.flac"]["outputs"][0] == "en/deep/en_espeak_park.txt"
    assert rows["zh/zh_jishu.flac"]["outputs"][0] == "zh/zh_jishu.flac.txt"
    assert rows["zh/zh_jishu.mp3"]["outputs"][0] == "zh/zh_jishu.mp3.txt"
    assert rows["en/fox.data"]["outputs"][0] == "en/fox.txt"
    for r in rows.values():
        for o in r["outputs"]:
            assert (out / o).is_file()
    assert rows["broken.wav"]["outputs"] == []


def test_batch_text_equals_hasrctl_transcribe(first_run: Any, corpus: Path) -> None:
    """The same file, model and options give the same bytes through batch as through the daemon."""
    _res, out, env = first_run
    try:
        for r in _rows(out):
            if r["status"] != "ok":
                continue
            for rel in r["outputs"]:
                fmt = {"txt": "text", "srt": "srt", "json": "json"}[rel.rsplit(".", 1)[1]]
                got = hasrctl("transcribe", "-q", "-f", fmt, r["path"], env=env, timeout=300)
                assert got.returncode == 0, show(got)
                assert (out / rel).read_text() == got.stdout, (rel, got.stdout)
    finally:
        hasrctl("stop", env=env)


def test_rerun_skips_everything_and_changes_nothing(first_run: Any, corpus: Path) -> None:
    res, out, env = first_run
    before = (out / "manifest.jsonl").read_bytes()
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")}
    again = hasrctl("batch", str(corpus), "-o", str(out), "-f", "txt,srt,json", "--workers", "2", env=env)
    assert again.returncode == 1, show(again)  # the broken file is still failed: its bytes did not change
    assert "9 of 9 input(s) are up to date (1 failed for their content" in again.stderr, again.stderr
    assert "1 of 9 file(s) failed" in again.stderr and "broken.wav: " in again.stderr
    assert "local Ray" not in again.stderr, "nothing to do must not start Ray"
    assert (out / "manifest.jsonl").read_bytes() == before
    assert stamps == {p: p.stat().st_mtime_ns for p in stamps}
    assert not _ray_processes(env)  # its cost is the scan and the hashes (benchmarks/batch.py: 0.029)


def test_changed_options_or_content_are_redone(module_tmp: str, corpus: Path, first_run: Any) -> None:
    """Only what changed runs again: a new format redoes everything; a file whose bytes changed is redone; a
    touched file with the same bytes is not; the broken file is retried when it was fixed."""
    _res, out0, env = first_run
    out = Path(module_tmp) / "out2"
    shutil.copytree(out0, out)
    src = Path(module_tmp) / "corpus2"
    shutil.copytree(corpus, src)
    # the manifest of the copy names the old paths: rewrite them to the new tree
    text = (out / "manifest.jsonl").read_text().replace(str(corpus), str(src))
    (out / "manifest.jsonl").write_text(text)
    for r in _rows(out):  # the copies have new mtimes: same bytes, so only hashed, not redone
        assert os.path.getsize(r["path"]) == r["size"]
    shutil.copy(DATA / "zh_nihao_shijie.flac", src / "broken.wav")  # fixed
    res = hasrctl("batch", str(src), "-o", str(out), "-f", "txt,srt,json", "--workers", "1", "--no-progress",
                  env=env, timeout=600)
    assert res.returncode == 0, show(res)
    assert "8 of 9 input(s) are up to date: transcribing the other 1" in res.stderr, res.stderr
    rows = {os.path.relpath(r["path"], src): r for r in _rows(out)}
    assert len(rows) == 9 and rows["broken.wav"]["status"] == "ok"
    assert rows["broken.wav"]["text"] == rows["zh/zh_nihao_shijie.flac"]["text"]


def test_a_new_format_on_a_rerun_is_made_from_the_stored_results_without_ray(module_tmp: str, corpus: Path,
                                                                              first_run: Any) -> None:
    """Issue 32 #3: the first run's 8 files get vtt (and -f all's verbose_json) from what it kept: no Ray, no
    transcription, and the vtt is what `hasrctl transcribe -f vtt` gives for that result."""
    from hasrd.formats import render
    from hasrd.transcript import from_json

    _res, out0, env = first_run
    out = Path(module_tmp) / "out3"
    shutil.copytree(out0, out)
    res = hasrctl("batch", str(corpus), "-o", str(out), "-f", "txt,srt,vtt,verbose_json", "--no-progress", env=env)
    assert res.returncode == 1, show(res)  # broken.wav stays failed
    assert "8 file(s) rendered as txt, srt, vtt, verbose_json from their stored results" in res.stderr, res.stderr
    assert "local Ray" not in res.stderr and not _ray_processes(env)
    rows = {os.path.relpath(r["path"], corpus): r for r in _rows(out)}
    fox = rows["en/en_quick_brown_fox.flac"]
    assert fox["outputs"][2] == "en/en_quick_brown_fox.vtt"
    result = json.loads((out / fox["result"]).read_text())
    assert (out / "en/en_quick_brown_fox.vtt").read_text() == render(from_json(result), "vtt")
    assert json.loads((out / "en/en_quick_brown_fox.json").read_text())["hasr"] == result


def test_unknown_model_is_refused_before_ray_starts(short_tmp: str, corpus: Path) -> None:
    out = Path(short_tmp) / "o"
    res = hasrctl("batch", str(corpus), "-o", str(out), "--model", "no-such-model", env=_env(short_tmp))
    assert res.returncode == 2, show(res)
    assert "no-such-model" in res.stderr and "does not exist" in res.stderr
    assert not out.exists()


@pytest.mark.parametrize("args, words", [
    (["{missing}"], "not found"),
    (["{corpus}", "-f", "docx"], "-f 'docx'"),
    (["{corpus}", "-f", "json,verbose_json"], "choose one"),
    (["{corpus}", "--language", "Klingon"], "--language"),
    (["{empty}"], "no audio or video files"),
    (["{corpus}/*.nothing"], "matches nothing"),
    (["{corpus}", "--address", "ray://127.0.0.1:port"], "ray://HOST:PORT"),
    (["{corpus}", "--address", "nohostport"], "HOST:PORT"),
])
def test_bad_usage_exits_2_with_one_clear_line(short_tmp: str, corpus: Path, args: list[str], words: str) -> None:
    empty = Path(short_tmp) / "empty"
    empty.mkdir()
    (empty / "readme.md").write_text("# no audio here\n")
    argv = [a.format(missing=str(corpus / "nope.wav"), corpus=corpus, empty=empty) for a in args]
    res = hasrctl("batch", *argv, "-o", str(Path(short_tmp) / "o"), env=_env(short_tmp))
    assert res.returncode == 2, show(res)
    assert words in res.stderr, res.stderr


@pytest.mark.parametrize("address", ["127.0.0.1:1", "auto", "ray://127.0.0.1:1"])
def test_an_unreachable_cluster_exits_3(short_tmp: str, corpus: Path, address: str) -> None:
    env = _env(short_tmp, RAY_ADDRESS="")
    env.pop("RAY_ADDRESS")
    res = hasrctl("batch", str(corpus / "en"), "-o", str(Path(short_tmp) / "o"), "--address", address, env=env,
                  timeout=300)
    assert res.returncode == 3, show(res)
    assert "Ray" in res.stderr and "Traceback" not in res.stderr


def test_a_list_file_and_stdin_name_the_inputs(short_tmp: str, corpus: Path) -> None:
    from hasrctl.batch import inputs

    lst = Path(short_tmp) / "list.txt"
    lst.write_text(f"# two files and a directory\n{corpus / 'broken.wav'}\n\n{corpus / 'zh'}\n")
    found = inputs.expand([f"@{lst}"])
    assert [os.path.relpath(f, corpus) for f in found.files] == [
        "broken.wav", "zh/zh_jishu.flac", "zh/zh_jishu.mp3", "zh/zh_nihao_shijie.flac", "zh/deep/zh_pangrama.flac"]
    import io

    again = inputs.expand(["-"], io.StringIO(lst.read_text()))
    assert again.files == found.files


def _slow_fake(base: str) -> dict[str, str]:
    """The fake engine taking 1.5 s per second of audio: time to kill an actor mid-file."""
    return _ray_env(base, HASR_ENGINE="fake", HASR_FAKE_RTF="1.5")


def _journal_rows(out: Path) -> int:
    n = 0
    for name in ("manifest.jsonl", ".hasr-batch.journal"):
        with contextlib.suppress(FileNotFoundError):
            n += sum(1 for line in (out / name).read_text().splitlines() if line.strip())
    return n


def _actor_pids(env: dict[str, str]) -> set[int]:
    return _pids(r"ray::MapWorker\(Map\(Transcriber\)\)", env)


def _busy_actor_pids(env: dict[str, str]) -> list[int]:
    """This run's actors running a file now (Ray titles an actor ``ray::MapWorker(...).submit`` while a task
    runs)."""
    return sorted(_pids(r"ray::MapWorker\(Map\(Transcriber\)\)\.", env))


def test_an_actor_killed_mid_file_is_restarted_and_the_file_retried(short_tmp: str, corpus: Path) -> None:
    out = Path(short_tmp) / "out"
    files = [corpus / "en" / "en_quick_brown_fox.flac", corpus / "en" / "deep" / "en_espeak_park.flac",
             corpus / "zh" / "deep" / "zh_pangrama.flac", corpus / "en" / "fox.data"]
    env = _slow_fake(short_tmp)
    proc = subprocess.Popen([sys.executable, "-m", "hasrctl", "batch", *map(str, files), "-o", str(out),
                             "--workers", "2", "--no-progress"], env=env, cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: _busy_actor_pids(env) or proc.poll() is not None, 120), "no actor started a file"
        busy = _busy_actor_pids(env)
        assert busy, f"the run ended first: {proc.communicate()}"
        actors_at_kill = _actor_pids(env)
        done_at_kill = _journal_rows(out)
        os.kill(busy[0], signal.SIGKILL)
        _stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert done_at_kill < len(files)
    assert proc.returncode == 0, stderr
    rows = _rows(out)
    assert sorted(r["path"] for r in rows) == sorted(map(str, files)), "each input exactly once"
    assert all(r["status"] == "ok" for r in rows)
    assert {r["pid"] for r in rows} - actors_at_kill, "a restarted actor (a new process) finished the killed file"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_keeps_what_finished_and_a_rerun_goes_on(short_tmp: str, corpus: Path, sig: int) -> None:
    """Ctrl-C (or a SIGTERM) mid-run: the finished files are in the manifest, Ray's local processes end with the
    run, and the same command goes on from there."""
    out = Path(short_tmp) / "out"
    env = _slow_fake(short_tmp)
    args = [sys.executable, "-m", "hasrctl", "batch", str(corpus / "en"), str(corpus / "zh"), "-o", str(out),
            "--workers", "1", "--no-progress"]
    proc = subprocess.Popen(args, env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert wait_until(lambda: _journal_rows(out) >= 1 or proc.poll() is not None, 180)
        proc.send_signal(sig)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "run the same command" in stderr
    # issue 32 #7: Ray's retry warnings of the actors it kills as it shuts down stay in its log, off the terminal
    assert _stdout == "" and "retries remaining" not in stderr and "(raylet)" not in stderr, (_stdout, stderr)
    assert wait_until(lambda: not _ray_processes(env), 30), "Ray's processes outlived the run"
    # and its temporary directory (the session, sockets and logs /tmp/ray would hold) goes with it
    assert wait_until(lambda: not [p for p in Path(env["RAY_TMPDIR"]).iterdir() if p.name.startswith("ray")], 10)
    rows = _rows(out)
    assert 1 <= len(rows) < 8 and all(r["status"] == "ok" for r in rows)
    assert not (out / ".hasr-batch.journal").exists()
    res = subprocess.run(args, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert f"{len(rows)} of 8 input(s) are up to date" in res.stderr
    assert len(_rows(out)) == 8


def test_a_file_that_kills_its_actor_every_time_is_failed_and_the_run_goes_on(short_tmp: str, corpus: Path) -> None:
    """The fake engine SIGKILLs itself half-way through every file: Ray restarts the actor and retries each file
    RETRIES times, then the file is recorded as failed (worker_died), once, and the command ends with exit 1."""
    from hasrctl.batch.run import RETRIES

    out = Path(short_tmp) / "out"
    env = _ray_env(short_tmp, HASR_ENGINE="fake", HASR_FAKE_CRASH_MID="1")
    res = hasrctl("batch", str(corpus / "en" / "en_hello_world.flac"), "-o", str(out), "--workers", "1",
                  "--no-progress", env=env, timeout=300)
    assert res.returncode == 1, show(res)
    rows = _rows(out)
    assert len(rows) == 1 and rows[0]["status"] == "failed", rows
    assert rows[0]["error"]["code"] == "worker_died" and f"{RETRIES + 1} times" in rows[0]["error"]["message"]
    assert "en_hello_world.flac" in res.stderr and "Traceback" not in res.stderr
    assert wait_until(lambda: not _ray_processes(env), 30), "Ray's processes outlived the run"


# ---- a cluster through the Ray Client (ray://) ------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _all_ours(env: dict[str, str]) -> set[int]:
    """Every process of this test's Ray (``ray start`` starts more than a driver's local Ray: a client server,
    a log monitor, the autoscaler's monitor)."""
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid() and _ours(int(p), env)}


@pytest.fixture(scope="module")
def client_head(module_tmp: str) -> Any:
    """A Ray cluster of one head started with ``ray start``, token authentication on (as Ray 2.60 does once
    ~/.ray/auth_token exists), its Ray Client server on a free port; stopped by killing this test's Ray processes
    only (``ray stop`` would stop every Ray on the machine)."""
    env = _env(os.path.join(module_tmp, "head"), RAY_AUTH_MODE="token")
    port = _free_port()
    ray = [sys.executable, "-m", "ray.scripts.scripts"]  # the `ray` command of this interpreter's Ray
    res = subprocess.run([*ray, "start", "--head", f"--port={_free_port()}", f"--ray-client-server-port={port}",
                          "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
                          f"--dashboard-agent-listen-port={_free_port()}"],
                         env=env, cwd=str(REPO), capture_output=True, text=True, timeout=180)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        yield f"ray://127.0.0.1:{port}", env
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _all_ours(env):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if wait_until(lambda: not _all_ours(env), 15):
                break


def _client_server_logs(env: dict[str, str]) -> str:
    logs = Path(env["RAY_TMPDIR"]) / "ray" / "session_latest" / "logs"
    """The head's Ray Client server logs, for a failure's message (a connection refused says only "see them")."""
    return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                   for p in sorted(logs.glob("ray_client*.err")))


def test_a_cluster_through_the_ray_client_gives_the_same_rows(module_tmp: str, corpus: Path, first_run: Any,
                                                              client_head: Any) -> None:
    """--address ray://HEAD:PORT: Ray Data cannot run in a Ray Client driver, so the pipeline runs in an actor on
    the cluster; the rows, texts and files are those of the local run, and nothing of the run stays on the
    head."""
    address, head_env = client_head
    _res, first_out, _env1 = first_run
    out = Path(module_tmp) / "client-out"
    env = _env(os.path.join(module_tmp, "driver"), RAY_AUTH_MODE="token")
    res = hasrctl("batch", str(corpus / "en"), "-o", str(out), "-f", "txt,srt", "--address", address,
                  "--no-progress", env=env, timeout=600)
    assert res.returncode == 0, show(res) + _client_server_logs(head_env)
    assert f"on the Ray cluster at {address}: 2 actor(s)" in res.stderr and "Traceback" not in res.stderr
    local = {r["path"]: r for r in _rows(first_out)}
    rows = _rows(out)
    assert sorted(r["path"] for r in rows) == sorted(p for p in local if p.startswith(str(corpus / "en")))
    for r in rows:
        assert r["status"] == "ok" and r["text"] == local[r["path"]]["text"], r
        theirs = {Path(o).suffix: first_out / o for o in local[r["path"]]["outputs"]}
        assert [Path(o).suffix for o in r["outputs"]] == [".txt", ".srt"]
        for o in r["outputs"]:
            assert (out / o).read_text() == theirs[Path(o).suffix].read_text()
    # the pipeline's actor and its pool are gone with the run; the head stays up for the next one
    assert wait_until(lambda: not _pids(r"ray::(Pipeline|MapWorker)", head_env), 60), "the run's actors stayed"
    assert _pids("raylet", head_env)


def test_a_ray_client_without_the_clusters_token_is_exit_3_with_the_fix(short_tmp: str, corpus: Path,
                                                                       client_head: Any) -> None:
    """Ray's client only times out (30 s) when the cluster refuses it for a missing token: say what to set."""
    address, _head_env = client_head
    env = _env(short_tmp)
    env.pop("RAY_AUTH_MODE", None)
    res = hasrctl("batch", str(corpus / "en" / "en_hello_world.flac"), "-o", str(Path(short_tmp) / "o"),
                  "--address", address, env=env, timeout=300)
    assert res.returncode == 3, show(res)
    assert f"cannot reach the Ray cluster at {address}" in res.stderr and "RAY_AUTH_MODE=token" in res.stderr
    assert "Traceback" not in res.stderr


def test_ctrl_c_through_the_ray_client_ends_the_runs_actors_on_the_cluster(short_tmp: str, corpus: Path,
                                                                          client_head: Any) -> None:
    """Interrupted, the driver kills its pipeline actor on the head, and the actor pool goes with it: nothing of
    the run keeps working (or holding a GPU) on the cluster; the finished files are in the manifest."""
    address, head_env = client_head
    out = Path(short_tmp) / "out"
    env = {**_slow_fake(short_tmp), "RAY_AUTH_MODE": "token"}
    proc = subprocess.Popen([sys.executable, "-m", "hasrctl", "batch", str(corpus / "en"), str(corpus / "zh"),
                             "-o", str(out), "--workers", "1", "--no-progress", "--address", address],
                            env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: _journal_rows(out) >= 1 or proc.poll() is not None, 180)
        assert _pids(r"ray::MapWorker", head_env), "no actor of the run on the head"
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr + _client_server_logs(head_env)
    assert "interrupted" in stderr
    rows = _rows(out)
    assert 1 <= len(rows) < 8 and all(r["status"] == "ok" for r in rows)
    assert wait_until(lambda: not _pids(r"ray::(Pipeline|MapWorker)", head_env), 60), "the run's actors stayed"


FULL_DISK = """\
import errno
import os

if os.environ.get("HASR_TEST_FULL_AFTER"):  # the driver's outputs: the disk fills after N transcripts
    from hasrctl import output

    real, written = output.write, [0]

    def write(target, text, force, **kw):
        written[0] += 1
        if written[0] > int(os.environ["HASR_TEST_FULL_AFTER"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(target, text, force, **kw)

    output.write = write
"""


def test_a_full_output_disk_stops_the_run_and_its_ray_cleanly(short_tmp: str) -> None:
    """Issue 31 #17 on a real Ray: OUTDIR fills after two files (ENOSPC from the outputs' writer, put in
    by a sitecustomize): one line naming OUTDIR and how many were done, exit 1, nothing else on stderr (Ray Data's
    iterator once ended after Ray's shutdown: a traceback, and a second local Ray started to print it), Ray's
    processes gone, and a rerun with room does only the other two."""
    src = Path(short_tmp) / "in"
    src.mkdir()
    for name in "abcd":
        shutil.copy(DATA / "en_hello_world.flac", src / f"{name}.flac")
    site = Path(short_tmp) / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FULL_DISK)
    env = _ray_env(os.path.join(short_tmp, "e"), HASR_ENGINE="fake", HASR_TEST_FULL_AFTER="4")  # a txt, a result
    env["PYTHONPATH"] = f"{site}{os.pathsep}{env['PYTHONPATH']}"
    out = Path(short_tmp) / "out"
    res = hasrctl("batch", str(src), "-o", str(out), "--workers", "1", "--no-progress", env=env, timeout=300)
    assert res.returncode == 1, show(res) + _ray_log(out)
    assert f"{out} is full (No space left on device): 2 of 4 file(s) done" in res.stderr, show(res) + _ray_log(out)
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr and "Ray instance" not in res.stderr
    assert not [p for p in out.rglob("*.tmp")]
    assert [Path(r["path"]).name for r in _rows(out)] == ["a.flac", "b.flac"]
    assert wait_until(lambda: not _ray_processes(env), 30), "Ray's processes outlived the run"
    # no second Ray (it would be in Ray's own default place), and the run's own temporary directory is gone
    assert not list(Path(env["RAY_TMPDIR"]).glob("ray/session_2*"))
    assert wait_until(lambda: not list(Path(env["RAY_TMPDIR"]).glob("ray-*")), 10)
    del env["HASR_TEST_FULL_AFTER"]
    res = hasrctl("batch", str(src), "-o", str(out), "--workers", "1", "--no-progress", env=env, timeout=300)
    assert res.returncode == 0 and "2 of 4 input(s) are up to date: transcribing the other 2" in res.stderr, show(res)
    assert [Path(r["path"]).name for r in _rows(out)] == ["a.flac", "b.flac", "c.flac", "d.flac"]
    assert wait_until(lambda: not _ray_processes(env), 30)

"""With no cluster named anywhere, the verbs fall back to local Ray and say so in one line;
download and dashboard do what makes sense locally, ssh refuses."""

from __future__ import annotations

from pathlib import Path

from support import FIXTURES, error_lines, run_driver

ENV = {"RAYDRIVER_HEAD": "", "SSH_AUTH_SOCK": ""}


def test_local_fallback_is_said_and_download_points_at_the_results(
    driver_home: Path, tmp_path: Path
) -> None:
    results = tmp_path / "res"
    r = run_driver(
        "submit",
        "--results",
        str(results),
        "--submission-id",
        "local-fallback-1",
        str(FIXTURES / "jobs" / "succeed.py"),
        home=driver_home,
        env=ENV,
    )
    assert r.returncode == 0, r.stderr
    said = [
        ln for ln in error_lines(r.stderr) if ln.startswith("using local Ray at http://127.0.0.1:")
    ]
    assert said == [
        said[0].split(" (")[0]
        + " (no --head, --terraform-dir, --resource-group/--deployment or saved profile)"
    ], r.stderr
    assert "python -m driver results download local-fallback-1\n" in r.stderr  # nothing to repeat

    r = run_driver("download", "local-fallback-1", home=driver_home, env=ENV)
    assert r.returncode == 0, r.stderr
    assert error_lines(r.stderr) == [
        "Job local-fallback-1 ran on local Ray: its results are already here: "
        f"{(results / 'local-fallback-1').resolve()}"
    ]
    r = run_driver("download", "no-such-job", home=driver_home, env=ENV)
    assert r.returncode == 2
    assert error_lines(r.stderr) == ["error: job no-such-job: no such job on local Ray"]

    r = run_driver("dashboard", home=driver_home, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr  # nothing to hold open: it returns at once
    assert r.stdout.startswith("Ray dashboard: http://127.0.0.1:"), r.stdout

    r = run_driver("ssh", home=driver_home, env=ENV)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        "error: ssh needs a remote cluster: expected --head, --terraform-dir, "
        "--resource-group/--deployment or a saved profile"
    ]

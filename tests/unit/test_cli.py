"""The CLI's contract without a cluster: help, usage errors, bad input (one line, exit 2)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from driver.cli import GRAMMAR, SHORTCUTS, build_parser, main, walk
from driver.cli.cluster import GCS_RAY_VERBS
from driver.cli.completion import COMMAND, SHELLS
from driver.cli.output import terminal_safe
from driver.localray import LocalRay
from driver.settings import MAX_RETRIES
from support import FIXTURES, REPO, error_lines, run_driver

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GROUPS = (*GRAMMAR, "local", "image", "completion")


def test_help_lists_the_groups_and_the_shortcuts_apart(tmp_path: Path) -> None:
    r = run_driver("--help", home=tmp_path)
    assert r.returncode == 0
    commands, epilog = r.stdout.split("\nshortcuts: ")
    for noun in GROUPS:
        assert f"\n    {noun}" in commands, f"{noun} missing from --help"
    for old in SHORTCUTS:
        assert f"\n    {old} " not in commands, f"shortcut {old} listed as a command"
        assert re.search(rf"[ ,]{old}\b", epilog), f"shortcut {old} missing from --help"
    assert "stop (= cancel)" in epilog  # the one whose verb changed name
    assert "exit codes" in epilog


@pytest.mark.parametrize(
    "command", [*GROUPS, *(f"{n} {v}" for n in GRAMMAR for v in GRAMMAR[n][1])]
)
def test_each_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*command.split(), "--help"])
    assert e.value.code == 0
    assert f"usage: python -m driver {command}" in capsys.readouterr().out


SCREEN = 40
"""Lines of one screen: every parser's --help fits in them at 100 columns."""


def test_every_help_fits_a_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    helps = {p.prog: p.format_help() for _, p in walk(build_parser())}
    assert len(helps) > 40  # groups, their verbs and the shortcuts
    tall = {prog: len(text.splitlines()) for prog, text in helps.items()}
    assert {prog: n for prog, n in tall.items() if n > SCREEN} == {}
    wide = [ln for text in helps.values() for ln in text.splitlines() if len(ln) > 100]
    assert wide == []


SAMPLE_ARGS = {
    "job submit": [str(FIXTURES / "jobs" / "succeed.py"), "--no-wait", "--pip", "x"],
    "job status": ["j-1", "--json"],
    "job logs": ["j-1", "-f"],
    "job cancel": ["j-1", "--timeout", "5"],
    "job list": ["--json", "--head", "h"],
    "results download": ["j-1", "--plot", "--results", "r"],
    "results runs": ["--json"],
    "results plot": ["a", "b", "-o", "c.png"],
    "cluster up": ["--terraform-dir", "d", "--var", "a=b", "-y"],
    "cluster down": ["--resource-group", "g"],
    "cluster start": ["--head", "h"],
    "cluster price": ["--parameters", "p.json"],
    "cluster use": ["--forget"],
    "cluster ssh": ["-i", "k"],
    "cluster exec": ["--retries", "2"],
    "cluster dashboard": ["--port", "8265"],
}
"""Arguments each command a shortcut stands for takes: the shortcut must take the same."""

SPELLING = {"verb", "job_verb", "cluster_verb", "results_verb", "prog"}
"""What the parse records of the spelling itself; the rest is what the handler gets."""


def _parse(argv: list[str]) -> dict[str, object]:
    ns = vars(build_parser().parse_args(argv))
    return {k: v for k, v in ns.items() if k not in SPELLING}


def test_each_shortcut_parses_to_its_command_s_handler_and_arguments() -> None:
    assert sorted(SAMPLE_ARGS) == sorted(SHORTCUTS.values())
    for old, new in SHORTCUTS.items():
        args = SAMPLE_ARGS[new]
        assert _parse([old, *args]) == _parse([*new.split(), *args]), old


def test_status_without_an_id_is_the_cluster_s_status() -> None:
    assert _parse(["status", "--json"]) == _parse(["cluster", "status", "--json"])
    assert _parse(["status"])["submission_id"] is None


def test_the_grammar_says_cancel_for_a_job_and_has_one_stop() -> None:
    """Stopping a job and stopping a cluster are not one verb: a job is cancelled; `stop` is
    only the old shortcut (a job's) and `local stop` (the local head)."""
    assert "stop" not in GRAMMAR["job"][1] and "cancel" in GRAMMAR["job"][1]
    assert "stop" not in GRAMMAR["cluster"][1]
    assert SHORTCUTS["stop"] == "job cancel"


@pytest.mark.parametrize("old", SHORTCUTS)
def test_each_shortcut_s_help_names_its_command(
    old: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([old, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"usage: python -m driver {old}" in out
    assert f"Shortcut of `python -m driver {SHORTCUTS[old]}`." in out


@pytest.mark.parametrize(
    ("old", "new"),
    [(["use"], ["cluster", "use"]), (["stop", "j-1"], ["job", "cancel", "j-1"])],
    ids=["use", "stop"],
)
def test_a_shortcut_runs_as_its_command(old: list[str], new: list[str], tmp_path: Path) -> None:
    """Really run, in a process of its own: same output, same exit code."""
    by_old = run_driver(*old, home=tmp_path / "old")
    by_new = run_driver(*new, home=tmp_path / "new")
    assert (by_old.returncode, by_old.stdout) == (by_new.returncode, by_new.stdout)
    assert error_lines(by_old.stderr) == error_lines(by_new.stderr), by_old.stderr
    assert by_old.stderr.strip(), "nothing said"


def test_unknown_verb_is_one_line_exit_2(tmp_path: Path) -> None:
    r = run_driver("sumbit", "train.py", home=tmp_path)
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert "invalid choice: 'sumbit'" in lines[0]
    assert "Traceback" not in r.stderr


def test_unknown_flag_is_one_line_exit_2(tmp_path: Path) -> None:
    r = run_driver("submit", "--frobnicate", "x.py", home=tmp_path)
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "unrecognized arguments: --frobnicate" in lines[0], r.stderr


def test_submit_missing_file_exits_2_without_starting_ray(tmp_path: Path) -> None:
    r = run_driver("submit", "does/not/exist.py", home=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        "error: no such file: does/not/exist.py (expected a Python script or a folder with one)"
    ]
    assert not LocalRay(tmp_path).state_file.exists()


def test_submit_folder_without_entrypoint_exits_2(tmp_path: Path) -> None:
    r = run_driver("submit", str(FIXTURES / "jobs" / "noentry"), home=tmp_path)
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "folder with no entrypoint" in lines[0], r.stderr


def test_submit_non_python_file_exits_2(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("hello")
    assert main(["submit", str(target)]) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["list", "--connect-timeout", "0"],
            "argument --connect-timeout: expected seconds above 0",
        ),
        (
            ["list", "--retries", str(MAX_RETRIES + 1)],
            f"argument --retries: expected at most {MAX_RETRIES} retries, got {MAX_RETRIES + 1}",
        ),
        (["submit", ""], "argument SCRIPT: the script is empty (an unset shell variable?)"),
        (["submit", "  "], "argument SCRIPT: the script is empty (an unset shell variable?)"),
    ],
)
def test_values_that_cannot_work_are_one_line_usage_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A connect timeout of 0 fails every attempt, a million retries are a typo, an empty SCRIPT
    names nothing: each is refused before anything is started, in one line, exit 2."""
    r = run_driver(*args, home=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not LocalRay(tmp_path).state_file.exists()


def test_the_smallest_and_largest_sensible_values_are_accepted() -> None:
    ns = build_parser().parse_args(
        ["list", "--connect-timeout", "0.5", "--retries", str(MAX_RETRIES)]
    )
    assert (ns.connect_timeout, ns.retries) == (0.5, MAX_RETRIES)


def test_bad_env_pair_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--env", "NOEQUALS", str(FIXTURES / "jobs" / "succeed.py")]) == 2
    assert "--env expects KEY=VALUE" in capsys.readouterr().err


def test_args_after_double_dash_only_for_submit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--", "x"]) == 2
    assert "list: arguments after `--` are only for job submit" in capsys.readouterr().err
    assert main(["job", "list", "--", "x"]) == 2
    assert "job list: arguments after `--` are only for job submit" in capsys.readouterr().err


def test_status_without_any_cluster_is_a_clear_error(tmp_path: Path) -> None:
    r = run_driver("status", "some-job", home=tmp_path)
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "local Ray is not running" in lines[0], r.stderr


def test_an_os_error_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = run_driver("render", "--out", str(blocker / "sub"), home=tmp_path)
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\x9b2Jb", "ab"),  # C1 CSI (U+009B): clear screen, without ESC
        ("a\x9b?1049hb", "ab"),  # C1 CSI: switch to the alternate screen
        ("\x9b31mred\x9b0m", "red"),  # 8-bit SGR too: only the 7-bit colours stay
        ("\x9d0;pwned title\x07x", "x"),  # C1 OSC (U+009D) title, ended by BEL
        ("\x9d8;;http://evil\x9clink\x9d8;;\x9c", "link"),  # OSC 8 link, ended by C1 ST
        ("\x90q#0;2;0;0;0\x9cx", "x"),  # C1 DCS (sixel), ended by ST
        ("\x9e private \x9c\x9f app \x9c\x98 sos \x9cx", "x"),  # PM, APC, SOS
        ("a\x1b[>0cb", "ab"),  # CSI with a private marker (report the terminal's version)
        ("a\x1b[ qb\x1b[=1u", "ab"),  # CSI with an intermediate byte; other private markers
        ("a\x1b(0b\x1b#8c\x1bcd", "abcd"),  # charset switch, screen test, full reset
        ("tail\x1b", "tail"),  # a lone ESC at the end of a chunk
        ("\x9d0;title\nnext line", "\nnext line"),  # an unended OSC ends at the line
        ("\x1b[31mred\x1b[0m \x1b[1;38;5;196mbold\x1b[m", None),  # colours stay as they are
        ("tab\tcr\rnl\n é ü ñ 你好 \u00a0", None),  # text, whitespace and non-ASCII stay
    ],
)
def test_terminal_control_sequences_are_removed_in_both_forms(raw: str, shown: str | None) -> None:
    """What a job prints reaches the terminal without the sequences that move the cursor, retitle,
    clear or link, whether they start with ESC or are 8-bit C1 controls (terminals decoding UTF-8
    act on U+009B as on ESC [); colours (7-bit SGR) stay."""
    assert terminal_safe(raw) == (raw if shown is None else shown)


def test_every_c1_control_is_removed() -> None:
    for code in range(0x80, 0xA0):
        assert terminal_safe(f"a{chr(code)}\nb") == "a\nb", hex(code)


@pytest.mark.parametrize(
    "command",
    [("status",), ("memory", "--stats-only"), ("--logging-level", "info", "timeline")],
    ids=["status", "memory", "timeline"],
)
def test_exec_refuses_a_ray_command_that_needs_the_gcs_in_one_line(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """`exec` hands a command the Jobs API's URL as RAY_ADDRESS; `ray status` and the other
    GCS commands fail on it with a traceback (issue 19, finding 8). Refused before anything
    is started, with the command that works instead."""
    ray = str(Path(sys.executable).parent / "ray")
    try:
        r = run_driver("exec", "--", ray, *command, home=tmp_path, timeout=300)
    finally:
        run_driver("local", "stop", home=tmp_path, timeout=120)  # main started one
    verb = next(w for w in command if w in GCS_RAY_VERBS)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert error_lines(r.stderr) == [
        f"error: exec: `ray {verb}` needs the cluster's GCS, which only the head reaches (exec "
        "passes on the Jobs API alone): run "
        "`python -m driver cluster ssh -- "
        f'"bash -lc {shlex.quote(shlex.join(["ray", *command]))}"` on the head, or '
        "`python -m driver cluster status` for the cluster's nodes and resources"
    ]
    assert not LocalRay(tmp_path).state_file.exists()  # refused before starting local Ray


def test_exec_help_names_the_ray_commands_it_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["exec", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Ray's own CLI and SDK work as they are" not in text
    for verb in GCS_RAY_VERBS:
        assert f"`ray {verb}`" in text


def test_the_docs_name_every_verb_of_the_driver() -> None:
    """A verb the docs never mention is one nobody finds (exec was missing: issue 19); docs/cli.md,
    generated from the parser, has them all anyway, so it does not count here."""
    pages = sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "cli.md")
    text = "\n".join(p.read_text() for p in pages)
    readme = re.sub(r"```.*?```", "", text, flags=re.S)
    named = {w for span in re.findall(r"`([^`]+)`", readme) for w in re.split(r"[\s|]+", span)}
    commands = {p.prog.split()[-1] for depth, p in walk(build_parser()) if depth > 0}
    assert "cancel" in commands and "completion" in commands
    assert sorted(commands - named) == []


def _complete(script: str, words: list[str], cwd: Path | None = None) -> list[str]:
    """What bash offers after ``words`` (the last one being typed), with ``script`` loaded."""
    array = " ".join(shlex.quote(w) for w in words)
    code = (
        f"{script}\nCOMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; "
        "_shtab_raydriver; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    r = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_the_bash_completion_offers_groups_verbs_and_flags(tmp_path: Path) -> None:
    r = run_driver("completion", "bash", home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(f"-F _shtab_{COMMAND} {COMMAND}")
    top = _complete(r.stdout, [COMMAND, ""])
    assert set(GROUPS) <= set(top)
    assert not set(SHORTCUTS) & set(top)  # completion teaches the grammar's spellings
    assert _complete(r.stdout, [COMMAND, "job", ""]) == list(GRAMMAR["job"][1])
    assert _complete(r.stdout, [COMMAND, "cluster", "up", "--te"]) == [
        "--terraform-dir",
        "--template",
    ]
    assert _complete(r.stdout, [COMMAND, "job", "submit", "--subm"]) == ["--submission-id"]
    # Paths where an argument names one: a script, a file, a folder.
    (tmp_path / "train.py").touch()
    (tmp_path / "infra").mkdir()
    assert _complete(r.stdout, [COMMAND, "job", "submit", "tr"], tmp_path) == ["train.py"]
    up = [COMMAND, "cluster", "up", "--terraform-dir", "in"]
    assert _complete(r.stdout, up, tmp_path) == ["infra"]


def test_the_zsh_completion_is_for_the_console_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith(f"#compdef {COMMAND}\n")


def test_completion_names_what_is_installed() -> None:
    """The script completes the console script pyproject installs, for shells shtab knows."""
    import shtab

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[COMMAND] == "driver.cli:main"
    assert set(SHELLS) <= set(shtab.SUPPORTED_SHELLS)


def test_the_driver_page_lists_every_shortcut() -> None:
    """docs/driver.md's paragraph on shortcuts names each of SHORTCUTS (and no other verb)."""
    page = (REPO / "docs" / "driver.md").read_text()
    paragraph = page.split("**Shortcuts.**")[1].split("\n\n")[0]
    spans = [s.split()[0] for s in re.findall(r"`([^`]+)`", " ".join(paragraph.split()))]
    verbs = {w for w in spans if w not in GRAMMAR and not w.startswith("-") and "/" not in w}
    assert verbs == set(SHORTCUTS)
    assert "`stop ID` (= `job cancel ID`)" in " ".join(paragraph.split())

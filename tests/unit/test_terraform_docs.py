"""infra/terraform/README.md's tables (terraform-docs format) match the .tf files: the
generator is scripts/terraform_docs.py (terraform-docs itself is not installable here)."""

from __future__ import annotations

from terraform_docs import README, outputs, section, tables, variables


def test_readme_tables_match_the_stack() -> None:
    assert section(README.read_text()) == tables(), (
        "infra/terraform/README.md is stale: run .venv/bin/python scripts/terraform_docs.py"
    )


def test_tables_list_every_variable_and_output() -> None:
    generated = tables()
    for name in variables():
        assert f'<a name="input_{name}"></a>' in generated
    for name in outputs():
        assert f'<a name="output_{name}"></a>' in generated
    assert "| yes |" in generated and "| no |" in generated

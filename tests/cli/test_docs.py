"""Issue 14.5 and "README and --help match": the documents point at files
that exist, promise only what exists, and list the options the command has."""

from __future__ import annotations

import re

from cli_helpers import REPO, cli_here

import procsched


def test_every_pointer_to_a_design_document_resolves() -> None:
    sources = [REPO / "README.md", REPO / "procsched" / "__init__.py", *sorted((REPO / "examples").glob("*.py"))]
    for source in sources:
        for match in re.finditer(r"(?<![\w/])((?:[\w.-]+/)*DESIGN\.md)", source.read_text().replace("\\n", " ")):
            assert (REPO / match.group(1)).is_file(), f"{source.name} points at {match.group(1)}, which is missing"
    assert "docs/DESIGN.md" in procsched.__doc__


def test_readme_promises_no_wait_method_on_a_handle() -> None:
    readme = (REPO / "README.md").read_text()
    assert "wait()" not in readme
    assert "concurrent.futures.wait" in readme
    assert not hasattr(procsched.TaskHandle, "wait")


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text))


def test_readme_and_help_list_the_same_options() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Jobs files") : readme.index("## Semantics")]
    shown = "".join(
        cli_here(*command, "--help").stdout
        for command in (
            (),
            ("run",),
            ("demo",),
            ("next",),
            ("web",),
            ("jobs",),
            ("history",),
            ("remove",),
            ("pause",),
            ("resume",),
            ("cancel",),
            ("run-now",),
        )
    )
    assert _options(section) - {"--help"} == _options(shown) - {"--help"}


def test_readme_documents_the_exit_statuses_of_help() -> None:
    readme = " ".join((REPO / "README.md").read_text().split())
    for text in (
        "0 after a clean stop",
        "1 if the jobs file cannot be loaded",
        "2 for a bad command line",
        "3 if the dispatcher process died",
        "130 after a forced stop",
        "4 if some runs failed",
        "5 if every run of some job failed",
    ):
        assert text in readme, text


def test_readme_live_table_sample_shows_every_demo_job() -> None:
    """Issue 26 item 11: the README's sample of ``procsched demo`` showed 5 of its 7 jobs."""
    from procsched import _demo_jobs
    from procsched._jobs import declared_jobs

    readme = (REPO / "README.md").read_text()
    sample = readme[readme.index("procsched - 7 jobs from the demo jobs") :]
    sample = sample[: sample.index("```")]
    declared = [job.name for job in declared_jobs(_demo_jobs)]
    rows = [line.split("│")[1].strip() for line in sample.splitlines() if line.startswith("│ ")]
    assert len(declared) == 7 and set(declared) <= set(rows), (declared, rows)

"""LangChain's official sandbox conformance suite (langchain-tests SandboxIntegrationTests) against
deepagents-e2b over the running exec-server (HTTP sessions, server as the unprivileged user)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest
from langchain_tests.integration_tests.sandboxes import SandboxIntegrationTests

from conftest import ensure_python_alias
from deepagents_e2b import E2BExecSandbox

# Known mismatches between langchain-tests 1.1.9 and deepagents 0.7.32 itself (BaseSandbox's
# inherited methods, not this backend): 0.7 `write` overwrites, and its `glob` returns absolute
# paths where these tests expect names relative to `path`.
KNOWN_UPSTREAM_MISMATCH = {
    "test_write_existing_file_fails",
    "test_glob_basic_pattern",
    "test_glob_with_directories",
    "test_glob_hidden_files_explicitly",
    "test_glob_with_character_class",
    "test_glob_with_question_mark",
    "test_glob",
}


@pytest.fixture(autouse=True)
def _known_mismatch_must_still_fail(request):
    # Strict: if one of these starts passing (a fixed deepagents or langchain-tests), the run
    # fails and the entry must be removed from the list.
    if request.node.originalname in KNOWN_UPSTREAM_MISMATCH:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="langchain-tests 1.1.9 vs deepagents 0.7.32 BaseSandbox mismatch (not this backend)",
            )
        )


class TestE2BExecSandbox(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    def sandbox(self, session_server) -> Iterator[E2BExecSandbox]:
        ensure_python_alias()
        sb = E2BExecSandbox(session_server.url)
        try:
            yield sb
        finally:
            sb.close()


# The suite's async tests carry no marker (they expect pytest-asyncio's auto mode); mark them here
# so the rest of tests/mcp keeps running on anyio.
for _name, _fn in inspect.getmembers(SandboxIntegrationTests, inspect.iscoroutinefunction):
    if _name.startswith("test_"):
        setattr(TestE2BExecSandbox, _name, pytest.mark.asyncio(loop_scope="function")(_fn))

"""Shared pytest plugins: fixtures live in their own modules, registered here."""

pytest_plugins = ["tests.llm_fixtures", "tests.fact_paths"]

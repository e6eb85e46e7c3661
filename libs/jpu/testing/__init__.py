"""Test support: fixtures over real servers (pytest plugins), builders, fake clock."""

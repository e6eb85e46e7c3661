"""The dispatcher service (SPEC E4): the dispatch cycle (§4); one active instance (leader lease)."""

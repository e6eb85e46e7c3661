"""The local backend (SPEC X9): jobs as local processes on the configured fake GPU inventory."""

"""The gateway (SPEC E4): REST API, auth, web console; reads projections, forwards commands."""

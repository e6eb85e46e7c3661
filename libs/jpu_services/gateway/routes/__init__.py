"""Routes grouped by domain; each module has one `router`."""

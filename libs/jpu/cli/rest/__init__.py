"""`jpu`'s subcommands over the REST API (SPEC U1, U5): `subcommands` registers and runs them.

subcommands.py  the parser of every API subcommand and the small ones (show, events, logs, ...)
client.py       RestClient: base URL, token, errors (ApiError names the API's code)
submit.py       `jpu submit`: script, --wrap, #SBATCH directives → the submit body
lists.py        `jpu queue|jobs|history`      cancel.py      `jpu cancel` (one, many, by filter)
info.py         `jpu whoami|tiers|sinfo`      notify.py      `jpu notifications`
workspaces.py   `jpu workspace ...`
views.py, jobviews.py, render.py   tables for people (`--json` prints the API's body as is)
"""

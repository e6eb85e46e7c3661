"""Whose Unix account a user's jobs run as (SPEC X4), for the `account` a job's answer names.
The account map and the `chdir` facts are jpu.backends.workdir_check's; the `chdir` itself is
checked by intake at submit (U5, SEC1: jpu.domain.submission.chdir_answer) and again on the
node at launch."""

from __future__ import annotations

from fastapi import Request

from jpu.backends.workdir_check import JobAccounts


def job_accounts(request: Request) -> JobAccounts:
    found: JobAccounts = request.app.state.job_accounts
    return found

"""Answers from the log (SPEC U4, F5): when a job will start (`estimate`), why it waited, what a
lab's usage is made of, the queue as it stood at a past moment.

The modules `wait`, `usage` and `queue_at` are pure (events in, answers out): they fold the log
with the services' own fold (`jpu.domain.cluster`) and run the policy core (`jpu.policy.cycle`)
on the snapshot the dispatcher builds (`jpu.domain.dispatch.snapshot`), so an auditor replaying
the same log gets the same answer. `words` turns the answers into sentences (English, Korean);
`jpu.bus.history` reads the log from NATS for them (snapshots, bounded ranges): this package
imports no I/O.
"""

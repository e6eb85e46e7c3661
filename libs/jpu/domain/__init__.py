"""The domain: the log's fold and every service's decisions, pure (SPEC sections → modules).

No NATS, PostgreSQL, OpenTelemetry or clock here (tests/unit/test_domain_is_pure.py checks it):
the services consume the log, call these functions with `now` and append what they return.

    S  job states (S1–S3, X8 per job)      states.py     JobView, apply_job_event, the state sets
    E  the log as state (E2, E3)           cluster.py    ClusterState, evolve (slots, queue, owed)
                                           codec.py      ClusterState as snapshot bytes (SPEC O6)
    P  GPUs and who holds them (P1, P2)    holdings.py   GPU rows, running jobs, inventory
    Q  submission (Q1–Q6), cancel (§8)     submission.py what intake answers and appends
                                           validation.py Q1: every bad field of a submit body
                                           limits.py     the bounds of every input (Q1, E3, E6)
                                           promotion.py  what intake promotes now (Q5, Q7, Q8, Q9)
                                           arrays.py     job arrays: parse, tasks, %N (Q7)
                                           dependencies.py  Q8 syntax and verdicts (holds: Q9)
                                           notify.py     what the notifier sends, to whom (Q10)
    D  dispatch (D1–D8), R3–R5, M2–M3      dispatch.py   the cycle's Snapshot, duties, events
    X  execution (X1–X8)                   execution.py  the agent's fold of a job, its next action
                                           ending.py     backend status → JobEnded (X6, X7, F5)
                                           observed.py   what a backend reports (X9, P2)
                                           attempts.py   a job's attempts told from its events
                                           workspaces.py a workspace's state, access, quota (X4a)
                                           retention.py  when an ended job's outputs may go (X2)
    F  charging (F3–F5)                    accounting.py what accounting appends (UsageCharged)
    U  estimates (U4)                      runs.py       recent run times per user and lab
       sbatch habits (U6, U8)              jobids.py     ids as typed: prefixes, ID_K, ID_[2-4]
       sbatch at execution (U6, U7)        slurm_io.py   -o/-e patterns, --open-mode, --signal
                                           slurm_env.py  the SLURM_* variables of an attempt
    SEC identities (SEC3)                  identities.py labs, users, token digests as events
    B  backfill (B1–B3)                    idle.py       since when each GPU is free (B1, B3)
                                           backfill_decisions.py  what it starts, cancels, records

The dispatch cycle itself (D1–D7, R1–R6) and the cost formulas (F1–F4) are the policy core,
`jpu.policy` (`cycle`, `charging`, `fairshare`, `queue`, `oom`, `maintenance`, `backfill_plan`),
and so are the sbatch options' table and decisions (U6: `sbatch_options`, `sbatch`).
"""

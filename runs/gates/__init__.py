"""Gates: a run asks a human before it acts, and waits without a worker.

Two primitives reach here from the pipeline API: `ctx.ask()` (a question with a form) and a
tool's `confirm` (a human approves, edits or rejects a call before its first attempt). A gate
opens with GATE_OPENED (the run *waiting*: no lease, no ticket, no job), is answered with
HUMAN_ANSWERED (which queues the stage again by ticket), and a stage that runs again finds
the recorded answer and never asks twice.

    forms.py      a Django form described as data (what the event records), rebuilt for the
                  page, and the diff of an answer against what was shown
    decision.py   the one decision about a gate (ask, or use the recorded answer), what a gate
                  is about (its subject) and its shape; the engine and the planner both call it
    rows.py       the gate rows' writes, each with its event through the ledger's one append
                  path: opened, answered, expired, reopened, closed with its run
    answers.py    answering: who may, what was shown (the digest), compare-and-set (the
                  deadline on the database's clock included), a quorum of different users,
                  the stage queued again; in bulk
    acts.py       what approving a call does, in the words its tick names, and their total
    shared.py     what identical gates share: the fields one bulk answer may give
    recorded.py   what a run's gates recorded: the approved confirmations, the arguments their
                  calls are made with, a reviewer's edit in the words every page says it
    reopen.py     Ask again: a confirmation whose call its target refused opens again
                  (GATE_REOPENED), the next answer's call under a key revision of its own;
                  so does a question that sent its stage back
    sent_back.py  a failed run whose stage failed on its newest answer: a question answered
                  "request changes" (the planner offers no resume) or a rejected
                  confirmation; Ask again reopens either
    timeouts.py   the sweeper's step: a deadline applies on_timeout, whatever the votes;
                  escalation before it

May import: ledger, models, events, pipeline, enqueue, signals and quantities (money as
every face shows it).
"""

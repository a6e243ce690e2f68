"""The sentinel: branches of a git tree followed commit by commit (:mod:`.follow`), each new commit built
and measured on each target from a queue that several processes share with leases (:mod:`.queue`,
:mod:`.run`), the change points of each series found as points arrive and bisected, each culprit
verified and attached to its change point (:mod:`.changes`); what a look did and what the store holds,
as one document (:mod:`.report`). It composes bisect/, analysis/ and store/."""

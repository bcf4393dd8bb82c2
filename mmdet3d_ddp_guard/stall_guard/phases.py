"""The names of the parts of a training iteration (data, forward, backward, ...) that a
rank's stall position reports: :class:`Phase`.

A phase crosses processes inside a rank's snapshot, as JSON through the c10d store
(:mod:`.store_protocol`): what is published is the plain string, and what is read back stays
one (a rank of another version of the package may name a phase this one does not know).
:class:`Phase` members compare equal to those strings, so the diagnosis compares a read
snapshot's phase with a member as it compares its own.
"""
from ..messages.text_enum import TextEnum


class Phase(TextEnum):
    """A rank's phase; a member reads as its text (:class:`TextEnum`)."""
    #: Built, not stepped yet.
    STARTING = 'starting'
    #: Loading the next batch, and the hooks before an iteration.
    DATA = 'data'
    FORWARD = 'forward'
    BACKWARD = 'backward'
    #: The completion of unused parameters, after the backward.
    SETTLING = 'settling'
    OPTIMIZER_STEP = 'optimizer step'
    #: The rest of the iteration.
    HOOKS = 'hooks'
    VALIDATION = 'validation'
    CHECKPOINT = 'checkpoint'


#: Phases whose wait is DDP's gradient all-reduce (a rank stalled there waits in it).
GRADIENT_PHASES = (Phase.BACKWARD, Phase.SETTLING)

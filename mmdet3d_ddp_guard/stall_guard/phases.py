"""Where in the training loop a rank is: the phases of :class:`~.rank_position.RankPosition`.

A phase crosses processes inside a rank's snapshot, as JSON through the c10d store
(:mod:`.store_protocol`): what is published is the plain string, and what is read back stays
one (a rank of another version of the package may name a phase this one does not know).
:class:`Phase` members compare equal to those strings, so the diagnosis compares a read
snapshot's phase with a member as it compares its own.
"""
from enum import Enum


class Phase(str, Enum):
    """A rank's phase. A member is its value, a plain string, everywhere text is made of it:
    it compares and hashes as the string, and ``str``, formatting, ``repr`` and
    ``json.dumps`` give exactly the string's (the three methods below: Enum's own write
    ``Phase.DATA``, and its formatting changed in Python 3.12), so that snapshots and
    diagnoses read the same as when phases were strings."""
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

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)

    def __repr__(self) -> str:
        return str.__repr__(self)


#: Phases whose wait is DDP's gradient all-reduce (a rank stalled there waits in it).
GRADIENT_PHASES = (Phase.BACKWARD, Phase.SETTLING)
